package core

import (
	"context"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/internal/testclock"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Conformance(t, func(t *testing.T, clock *testclock.Clock) model.Store {
		s, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// decideStore is the simplest Store: a map of States under one mutex,
// changed only by model.Step and model.Settle. Running the conformance
// suite against it tests the algorithms themselves, apart from any store's
// bookkeeping.
type decideStore struct {
	mu     sync.Mutex
	clock  model.Clock
	states map[string]model.State
	held   map[string]int64 // the end of each key's penalty
}

func (s *decideStore) Take(ctx context.Context, asks []model.Ask, out []model.Decision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	next := make([]model.State, len(asks))
	all := true
	for i, a := range asks {
		k := a.Limit.Namespace() + "\n" + a.Key
		next[i], out[i] = coretest.Decide(a.Limit, s.states[k], now, a.Cost)
		if a.Limit.Penalty != 0 {
			s.held[k] = model.Penalise(a.Limit, &out[i], s.held[k], now)
		}
		all = all && out[i].Allowed
	}
	if all {
		for i, a := range asks {
			s.states[a.Limit.Namespace()+"\n"+a.Key] = next[i]
		}
	}
	return nil
}

func (s *decideStore) Refund(ctx context.Context, asks []model.Ask, charged []model.Decision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	for i, a := range asks {
		k := a.Limit.Namespace() + "\n" + a.Key
		st := coretest.CopyState(s.states[k])
		model.Settle(a.Limit, &st, now, a.Cost, 0, &charged[i].Mark)
		s.states[k] = st
	}
	return nil
}

func (s *decideStore) Settle(ctx context.Context, asks []model.Ask, charged []model.Decision, actual []float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	for i, a := range asks {
		k := a.Limit.Namespace() + "\n" + a.Key
		st := coretest.CopyState(s.states[k])
		model.Settle(a.Limit, &st, now, a.Cost, actual[i], &charged[i].Mark)
		s.states[k] = st
	}
	return nil
}

func TestDecideConformance(t *testing.T) {
	storetest.Conformance(t, func(t *testing.T, clock *testclock.Clock) model.Store {
		return &decideStore{clock: clock.Now, states: make(map[string]model.State), held: make(map[string]int64)}
	})
}
