package telemetry

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core/model"
)

func TestParseNearLimit(t *testing.T) {
	for s, want := range map[string]float64{"10%": 0.1, "0.25": 0.25, "100%": 1, "1": 1, "0.5%": 0.005} {
		if got, err := ParseNearLimit(s); err != nil || got != want {
			t.Errorf("ParseNearLimit(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "0%", "150%", "1.5", "-0.1", "close", "NaN", "10 %"} {
		_, err := ParseNearLimit(s)
		fe := model.FieldOf(err)
		if fe == nil || fe.Field != "near_limit" || fe.Value != s || !strings.Contains(fe.Reason, "above 0 and at most 100%") {
			t.Errorf("ParseNearLimit(%q): %v, want a FieldError about near_limit", s, err)
		}
	}
}
