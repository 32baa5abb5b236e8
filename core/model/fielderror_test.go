package model

import (
	"errors"
	"testing"
)

// TestFieldErrorText checks the text of a FieldError with and without a
// value and a Needs, under a host's own names, and that FieldOf finds it
// alone and inside a LimitError.
func TestFieldErrorText(t *testing.T) {
	cases := []struct {
		err         *FieldError
		field, want string
	}{
		{&FieldError{Field: "burst", Value: "0", Reason: "must be positive"}, "", `burst "0": must be positive`},
		{&FieldError{Field: "burst", Reason: "required"}, "", `burst: required`},
		{&FieldError{Field: "instances", Reason: "only the fallback divides", Needs: "fallback"}, "", `instances: only the fallback divides (set fallback, or remove instances)`},
		{&FieldError{Field: "instances", Value: "2", Reason: "bad", Needs: "fallback"}, "zone.instances", `zone.instances "2": bad (set fallback, or remove zone.instances)`},
	}
	for _, c := range cases {
		got := c.err.Error()
		if c.field != "" {
			got = c.err.Format(c.field, c.err.Needs)
		}
		if got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
	fe := &FieldError{Field: "rate", Value: "x", Reason: "bad"}
	le := &LimitError{Index: 2, Limit: "api", Err: fe}
	if got := le.Error(); got != `limit "api": rate "x": bad` {
		t.Errorf("LimitError: got %q", got)
	}
	if FieldOf(le) != fe || FieldOf(fe) != fe || FieldOf(errors.New("x")) != nil || FieldOf(nil) != nil {
		t.Error("FieldOf does not find the FieldError it should")
	}
	if u, ok := le.Unwrap().(*FieldError); !ok || u != fe {
		t.Error("Unwrap does not return the FieldError")
	}
}
