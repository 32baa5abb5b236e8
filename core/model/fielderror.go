package model

import "strconv"

// FieldError is a configuration value that core refuses. Field names the
// field in core's words ("rate.period", "burst", "max_delay", "jitter",
// "instances", ...: the names of the Go fields, in snake case, with a dot
// for a part of a field); Value is the value as core read it, or "" when
// the rule concerns the field as a whole; Reason says what is wrong. Needs,
// when set, is a field that the value has no meaning without.
type FieldError struct {
	Field  string
	Value  string
	Reason string
	Needs  string
}

// Refuse returns the FieldError of field, whose value (or "") core
// refuses for reason. Core writes its refusals with it, not with a
// composite literal, which Yaegi keeps as twice the nodes in the Traefik
// plugin's heap.
func Refuse(field, value, reason string) *FieldError {
	return &FieldError{Field: field, Value: value, Reason: reason}
}

// Error is `<field> "<value>": <reason>`, without the value when it is
// empty, followed with Needs by "(set <needs>, or remove <field>)".
func (e *FieldError) Error() string {
	return e.Format(e.Field, e.Needs)
}

// Format is Error with the field named field and Needs named needs: a
// host's names for them.
func (e *FieldError) Format(field, needs string) string {
	s := field
	if e.Value != "" {
		s += " " + strconv.Quote(e.Value)
	}
	s += ": " + e.Reason
	if needs != "" {
		s += " (set " + needs + ", or remove " + field + ")"
	}
	return s
}

// LimitError is a FieldError of the limit named Limit. Index is the
// limit's position in the list core.NewGate or CheckLimits checked, or -1 from
// Limit.Validate.
type LimitError struct {
	Index int
	Limit string
	Err   *FieldError
}

// Error is `limit "<name>": ` and the FieldError.
func (e *LimitError) Error() string {
	return "limit " + strconv.Quote(e.Limit) + ": " + e.Err.Error()
}

// Unwrap returns the FieldError.
func (e *LimitError) Unwrap() error { return e.Err }

// FieldOf returns the FieldError err is or holds (as a LimitError), or nil.
// It asserts the two types rather than calling errors.As, which Yaegi
// cannot apply to interpreted types.
func FieldOf(err error) *FieldError {
	if le, ok := err.(*LimitError); ok {
		return le.Err
	}
	fe, _ := err.(*FieldError)
	return fe
}
