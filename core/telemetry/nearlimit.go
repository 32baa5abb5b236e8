package telemetry

import (
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core/model"
)

// ParseNearLimit reads a near-miss share as hosts write it: a percentage
// ("10%") or a fraction ("0.1") of a limit's capacity, above 0 and at most
// 1. Its error is a FieldError about the field "near_limit", which a host
// names as its own option.
func ParseNearLimit(s string) (float64, error) {
	num, pct := strings.CutSuffix(s, "%")
	x, err := strconv.ParseFloat(num, 64)
	if pct {
		x /= 100
	}
	if err != nil || !(x > 0 && x <= 1) {
		return 0, model.Refuse("near_limit", s, "want a share of the capacity above 0 and at most 100%, such as 10% or 0.1")
	}
	return x, nil
}
