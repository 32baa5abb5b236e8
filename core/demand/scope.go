package demand

import "github.com/sluicehq/sluice/core/model"

// The scopes of a zone's demand, as the hosts' option demand_scope and
// Advice.Scope name them.
const (
	// ScopeInstance is the demand the answering instance sees (Recorder).
	ScopeInstance = "instance"
	// ScopeFleet is the demand of every instance that records the zone's
	// demand in its Redis store (redisstore.Demand): behind a balancer
	// that spreads a key's requests over instances, each instance sees
	// only part of each key's demand.
	ScopeFleet = "fleet"
)

// CheckScope checks a zone's demand scope: "" (ScopeInstance),
// ScopeInstance or ScopeFleet, which needs a Redis store (onRedis) and
// demand recorded (record). Its error is a FieldError about the field
// "demand_scope", which a host names as its own option.
func CheckScope(scope string, onRedis, record bool) error {
	switch {
	case scope != "" && scope != ScopeInstance && scope != ScopeFleet:
		return model.Refuse("demand_scope", scope, "want instance or fleet")
	case scope == ScopeFleet && !onRedis:
		return model.Refuse("demand_scope", scope, "needs a Redis store, which the instances share")
	case scope == ScopeFleet && !record:
		return model.Refuse("demand_scope", scope, "needs the zone's demand recorded: a rate, and demand keys not off")
	}
	return nil
}
