package model

import (
	"testing"
	"time"
)

// TestPenaltyChecked: a penalty must be positive, whole microseconds,
// and on a rate without a lease; the error names the field.
func TestPenaltyChecked(t *testing.T) {
	rate := Rate{Quota: 5, Period: time.Minute}
	for _, l := range []Limit{
		{Name: "a", Rate: rate, Penalty: -time.Second},
		{Name: "a", Rate: rate, Penalty: time.Nanosecond},
		{Name: "a", Rate: rate, Penalty: time.Minute, Lease: 1},
		{Name: "a", MaxInFlight: 2, Penalty: time.Minute},
	} {
		err := l.Validate()
		le, ok := err.(*LimitError)
		if !ok {
			t.Errorf("penalty %v, lease %v, in flight %d: %v, want a *LimitError", l.Penalty, l.Lease, l.MaxInFlight, err)
			continue
		}
		if le.Err == nil || le.Err.Field != "penalty" {
			t.Errorf("penalty %v: %v, want the field penalty", l.Penalty, err)
		}
	}
	l := Limit{Name: "a", Rate: rate, Penalty: 15 * time.Minute}
	if err := l.Validate(); err != nil {
		t.Error(err)
	}
}

// TestPenalise: a refusal starts a penalty; an admission during one is
// refused with the penalty's time left, and after it passes through.
func TestPenalise(t *testing.T) {
	l := &Limit{Name: "a", Rate: Rate{Quota: 1, Period: time.Second}, Penalty: 10 * time.Second}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	d := Decision{RetryAfter: time.Second}
	if until := Penalise(l, &d, 0, 100); until != 100+int64(10*time.Second) || d.RetryAfter != 10*time.Second || d.Next != 10*time.Second {
		t.Errorf("a refusal: until %d, %+v", until, d)
	}
	d = Decision{Allowed: true, Remaining: 3, Reset: time.Second, Next: time.Second, Mark: Mark{OK: true}}
	if until := Penalise(l, &d, 100+int64(4*time.Second), 100); until != 100+int64(4*time.Second) || d.Allowed || d.Mark.OK || d.Remaining != 0 || d.RetryAfter != 4*time.Second || d.Reset != 4*time.Second {
		t.Errorf("an admission held out: until %d, %+v", until, d)
	}
	d = Decision{Allowed: true, Remaining: 3}
	if until := Penalise(l, &d, 50, 100); until != 50 || !d.Allowed || d.Remaining != 3 {
		t.Errorf("an admission after a penalty: until %d, %+v", until, d)
	}
}
