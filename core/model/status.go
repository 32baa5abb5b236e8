package model

import (
	"strconv"
)

// StatusSet is the response statuses that a limit counts
// (Limit.CountStatus): each element a status code, 100 to 599, or a
// class, 1 to 5 for "1xx" to "5xx". nil counts every response.
type StatusSet []int

// ParseStatusSet parses the statuses of a limit's count_status, each a
// code ("401") or a class ("4xx"); none gives nil, which counts every
// response. The error names the status at fault.
func ParseStatusSet(statuses []string) (StatusSet, error) {
	var s StatusSet
	for _, f := range statuses {
		n := parseStatus(f)
		if n == 0 {
			return nil, Refuse("count_status", f, "must be a status code from 100 to 599 or a class from 1xx to 5xx")
		}
		s = append(s, n)
	}
	return s, nil
}

// parseStatus returns the code f, "100" to "599", or its class, 1 to 5
// for "1xx" to "5xx"; 0 for anything else.
func parseStatus(f string) int {
	if len(f) != 3 || f[0] < '1' || f[0] > '5' {
		return 0
	}
	if f[1:] == "xx" || f[1:] == "XX" {
		return int(f[0] - '0')
	}
	n, err := strconv.Atoi(f)
	if err != nil {
		return 0
	}
	return n
}

// Counts reports whether s counts a response of status: s is nil, or
// holds status or its class. A status of 0 (no response: the client left
// or the handler panicked) counts whatever s holds, so that a request
// cut short keeps its charge.
func Counts(s StatusSet, status int) bool {
	if s == nil || status == 0 {
		return true
	}
	for _, c := range s {
		if c == status || c == status/100 {
			return true
		}
	}
	return false
}

// Answered reports whether l must see its request's response: it counts
// only some statuses (CountStatus) or takes its cost from the response.
func (l *Limit) Answered() bool { return l.CountStatus != nil || l.CostFromResponse() }

// CostFromResponse reports whether l takes its cost from its response
// (CostHeader, CostBytes).
func (l *Limit) CostFromResponse() bool { return l.CostHeader != "" || l.CostBytes }

// DefaultCost is the cost of l's requests when none is set: 1, or 0 for
// a limit whose cost comes from its response, whose estimate is then
// nothing.
func (l *Limit) DefaultCost() float64 {
	if l.CostFromResponse() {
		return 0
	}
	return 1
}

// responseCostField names the option that takes l's cost from its
// response.
func (l *Limit) responseCostField() string {
	if l.CostBytes {
		return "cost_bytes"
	}
	return "cost_header"
}
