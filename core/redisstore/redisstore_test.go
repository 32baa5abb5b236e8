package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/internal/testclock"
)

func newTestRedisStore(t testing.TB, client model.Scripter, cluster bool) *Store {
	t.Helper()
	s, err := New(Config{Client: client, Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRedisStoreConformance(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 4)
	storetest.Conformance(t, func(t *testing.T, clock *testclock.Clock) model.Store {
		s := newTestRedisStore(t, client, false)
		s.clock = clock.Now
		return s
	})
}

// TestRedisStoreRace races 32 callers over 4 connections for the last
// tokens of a bucket that does not refill in the meantime: exactly as many
// are admitted as there are tokens, on Redis's own clock.
func TestRedisStoreRace(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newTestRedisStore(t, resptest.Client(t, srv.Addr, 4), false)
	raceLastToken(t, s, 500)
}

// raceLastToken runs trials in which 32 goroutines each ask a fresh key of a
// 10-token bucket (refilling 1 per day) for one token.
func raceLastToken(t *testing.T, s *Store, trials int) {
	const tokens, callers = 10, 32
	l := coretest.Limit(t, "race", model.TokenBucket, "1/24h", tokens, 0)
	for trial := 0; trial < trials; trial++ {
		key := coretest.Nonce + "/race/" + strconv.Itoa(trial)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var admitted, failed int32
		var firstErr atomic.Value
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < callers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				out := make([]model.Decision, 1)
				if err := s.Take(ctx, []model.Ask{{Limit: l, Key: key, Cost: 1}}, out); err != nil {
					atomic.AddInt32(&failed, 1)
					firstErr.Store(err.Error())
					return
				}
				if out[0].Allowed {
					atomic.AddInt32(&admitted, 1)
				}
			}()
		}
		close(start)
		wg.Wait()
		cancel()
		if failed > 0 {
			t.Fatalf("trial %d: %d calls failed, e.g. %v", trial, failed, firstErr.Load())
		}
		if admitted != tokens {
			t.Fatalf("trial %d: %d of %d callers admitted for %d tokens", trial, admitted, callers, tokens)
		}
	}
}

// countingScripter counts the scripts loaded through it.
type countingScripter struct {
	model.Scripter
	loads int32
}

func (c *countingScripter) ScriptLoad(ctx context.Context, script string) (string, error) {
	atomic.AddInt32(&c.loads, 1)
	return c.Scripter.ScriptLoad(ctx, script)
}

// TestRedisStoreScriptFlush: the store loads its script at first use, not
// again, and again after SCRIPT FLUSH, transparently.
func TestRedisStoreScriptFlush(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	cs := &countingScripter{Scripter: client}
	s := newTestRedisStore(t, cs, false)
	l := coretest.Limit(t, "flush", model.TokenBucket, "10/s", 0, 0)
	key := coretest.Nonce + "/flush"
	for i, want := range []int32{1, 1, 2, 2} {
		if i == 2 {
			if _, err := client.Do(context.Background(), "SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		if d := coretest.Take(t, s, l, key, 1); !d.Allowed {
			t.Fatalf("take %d rejected: %+v", i+1, d)
		}
		if got := atomic.LoadInt32(&cs.loads); got != want {
			t.Fatalf("after take %d: %d script loads, want %d", i+1, got, want)
		}
	}
	ctx := context.Background()
	if _, err := client.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if err := s.Refund(ctx, []model.Ask{{Limit: l, Key: key, Cost: 1}}, []model.Decision{{}}); err != nil {
		t.Fatalf("Refund after SCRIPT FLUSH: %v", err)
	}
}

// TestRedisStoreOutage: with the server stopped, Take fails within its
// context's deadline; once the server is back, the same store decides again.
func TestRedisStoreOutage(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newTestRedisStore(t, resptest.Client(t, srv.Addr, 2), false)
	l := coretest.Limit(t, "outage", model.TokenBucket, "100/s", 0, 0)
	key := coretest.Nonce + "/outage"
	coretest.Take(t, s, l, key, 1)
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	began := time.Now()
	err := s.Take(ctx, []model.Ask{{Limit: l, Key: key, Cost: 1}}, make([]model.Decision, 1))
	took := time.Since(began)
	cancel()
	if err == nil {
		t.Fatal("Take succeeded with the server stopped")
	}
	if took > 2*time.Second {
		t.Errorf("Take with a 100ms context returned after %v", took)
	}
	srv.Restart(t)
	deadline := time.Now().Add(time.Second)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err = s.Take(ctx, []model.Ask{{Limit: l, Key: key, Cost: 1}}, make([]model.Decision, 1))
		cancel()
		if err == nil {
			break
		}
		if attempt >= 50 || time.Now().After(deadline) {
			t.Fatalf("no decision within 1s of the restart (%d attempts): %v", attempt, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisStoreFractionalCost: costs of 2.5 are charged and reported
// exactly, in every algorithm, and refunded exactly.
func TestRedisStoreFractionalCost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	s := newTestRedisStore(t, client, false)
	clock := testclock.New(testclock.Epoch)
	s.clock = clock.Now
	for _, alg := range model.Algorithms {
		burst := 0.0
		if alg == model.TokenBucket || alg == model.LeakyBucket {
			burst = 10
		}
		l := coretest.Limit(t, "frac", alg, "10/h", burst, 0)
		key := coretest.Nonce + "/frac"
		var last model.Decision
		for i := 1; i <= 4; i++ {
			d := coretest.Take(t, s, l, key, 2.5)
			if want := 10 - 2.5*float64(i); !d.Allowed || d.Remaining != want {
				t.Fatalf("%s: take %d of 2.5: %+v, want allowed with exactly %v remaining", alg, i, d, want)
			}
			last = d
		}
		if d := coretest.Take(t, s, l, key, 2.5); d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: take 5 of 2.5: %+v, want rejected with 0 remaining", alg, d)
		}
		if err := s.Refund(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: 2.5}}, []model.Decision{last}); err != nil {
			t.Fatal(err)
		}
		if d := coretest.Take(t, s, l, key, 2.5); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: 2.5 after refunding 2.5: %+v, want allowed with exactly 0 remaining", alg, d)
		}
	}
}

// TestRedisStoreKeys checks the key layout, by default with a digest of
// the client's key and no trace of the key itself, with ReadableKeys with
// the key, and that every key expires when its state becomes that of a
// fresh key.
func TestRedisStoreKeys(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	ctx := context.Background()
	tests := []struct {
		alg     model.Algorithm
		rate    string
		maxPTTL int64 // ms
	}{
		{model.TokenBucket, "1/s", 1000}, // one token missing: full again in 1 s
		{model.LeakyBucket, "2/s", 500},
		{model.FixedWindow, "5/s", 1000},
		{model.SlidingWindowCounter, "5/s", 2000},
		{model.SlidingWindowLog, "5/s", 1000},
	}
	for _, readable := range []bool{false, true} {
		s, err := New(Config{Client: client, ReadableKeys: readable})
		if err != nil {
			t.Fatal(err)
		}
		key := coretest.Nonce + "/ttl/" + strconv.FormatBool(readable)
		for _, tt := range tests {
			l := coretest.Limit(t, "ttl", tt.alg, tt.rate, 0, 0)
			coretest.Take(t, s, l, key, 1)
			part := "#" + hex.EncodeToString(sha256Of(key)[:16])
			if readable {
				part = key
			}
			name := "sluice:{ttl:" + string(tt.alg) + ":" + part + "}"
			names := []string{name}
			if tt.alg == model.SlidingWindowLog {
				names = append(names, name+":log")
			}
			for _, n := range names {
				v, err := client.Do(ctx, "PTTL", n)
				if err != nil {
					t.Fatal(err)
				}
				if ms, ok := v.(int64); !ok || ms <= 0 || ms > tt.maxPTTL {
					t.Errorf("readable %v, %s: PTTL %s = %v, want in (0, %d]", readable, tt.alg, n, v, tt.maxPTTL)
				}
			}
		}
		v, err := client.Do(ctx, "KEYS", "*"+key+"*")
		if n := len(v.([]interface{})); err != nil || (n > 0) != readable {
			t.Errorf("readable %v: %d Redis keys name the client's key %q (%v)", readable, n, key, err)
		}
		// A long key is bounded, and braces in a key do not move its state.
		l := coretest.Limit(t, "long", model.TokenBucket, "1/s", 0, 0)
		long := strings.Repeat("}{x", 1000) + strconv.FormatBool(readable)
		coretest.Take(t, s, l, long, 1)
		part := "#" + hex.EncodeToString(sha256Of(long)[:16])
		if readable {
			part = keyspec.BoundKey(long)
		}
		if v, err := client.Do(ctx, "EXISTS", "sluice:{long:token_bucket:"+part+"}"); err != nil || v != int64(1) {
			t.Errorf("readable %v: state of a long key: EXISTS = %v, %v; want 1", readable, v, err)
		}
	}
}

// sha256Of is the SHA-256 of s.
func sha256Of(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

// TestRedisStoreLogMerge: a sliding log at MaxLogQuota entries merges a new
// request into its newest entry instead of growing.
func TestRedisStoreLogMerge(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	s := newTestRedisStore(t, client, false)
	clock := testclock.New(testclock.Epoch)
	s.clock = clock.Now
	l := coretest.Limit(t, "merge", model.SlidingWindowLog, strconv.Itoa(model.MaxLogQuota)+"/m", 0, 0)
	key := coretest.Nonce + "/merge"
	name := s.key(l, key)
	// Fill the log with MaxLogQuota−1 entries of 0.25 at the clock's instant.
	now := strconv.FormatInt(testclock.Epoch/1e9, 10) + " 0"
	push := []string{"RPUSH", name + ":log"}
	for i := 0; i < model.MaxLogQuota-1; i++ {
		push = append(push, now+" 0.25")
	}
	ctx := context.Background()
	if _, err := client.Do(ctx, push...); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Do(ctx, "HSET", name, "t", now, "a", model.FormatFloat(0.25*(model.MaxLogQuota-1)), "b", "0"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	for i, cost := range []string{"0.25", "0.5"} {
		d := coretest.Take(t, s, l, key, 0.25)
		if want := model.MaxLogQuota - 0.25*float64(model.MaxLogQuota+i); !d.Allowed || math.Abs(d.Remaining-want) > 1e-9 {
			t.Fatalf("take %d: %+v, want allowed with %v remaining", i+1, d, want)
		}
		n, err := client.Do(ctx, "LLEN", name+":log")
		if err != nil || n != int64(model.MaxLogQuota) {
			t.Fatalf("take %d: LLEN = %v, %v; want %d", i+1, n, err, model.MaxLogQuota)
		}
		want := strconv.FormatInt(clock.Now()/1e9, 10) + " " + strconv.FormatInt(clock.Now()%1e9, 10) + " " + cost
		if last, err := client.Do(ctx, "LINDEX", name+":log", "-1"); err != nil || last != want {
			t.Fatalf("take %d: newest entry %v, %v; want %q", i+1, last, err, want)
		}
		clock.Advance(time.Millisecond)
	}
}

// TestRedisLuaMaxLog: the scripts' MAX_LOG is MaxLogQuota.
func TestRedisLuaMaxLog(t *testing.T) {
	if want := "local MAX_LOG = " + strconv.Itoa(model.MaxLogQuota) + "\n"; !strings.Contains(redisTakeScript, want) {
		t.Errorf("redisTakeScript lacks %q", want)
	}
}

func TestNewRedisStore(t *testing.T) {
	tests := []struct {
		cfg     Config
		wantErr string
		prefix  string
	}{
		{Config{}, "client is required", ""},
		{Config{Client: &countingScripter{}}, "", DefaultPrefix},
		{Config{Client: &countingScripter{}, Prefix: "app1:"}, "", "app1:"},
		{Config{Client: &countingScripter{}, Prefix: "a{b}:"}, "must not contain braces", ""},
	}
	for _, tt := range tests {
		s, err := New(tt.cfg)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewRedisStore(%+v): error %v, want %q", tt.cfg, err, tt.wantErr)
			}
			continue
		}
		if err != nil || s.prefix != tt.prefix {
			t.Errorf("NewRedisStore(%+v) = prefix %q, %v; want %q", tt.cfg, s.prefix, err, tt.prefix)
		}
	}
}

// fixedScripter answers every EvalSha with one reply or error.
type fixedScripter struct {
	reply interface{}
	err   error
}

func (f *fixedScripter) EvalSha(ctx context.Context, sha string, keys, args []string) (interface{}, error) {
	return f.reply, f.err
}

func (f *fixedScripter) ScriptLoad(ctx context.Context, script string) (string, error) {
	return "", f.err
}

// TestRedisStoreReplies: malformed replies and errors are reported as
// errors, never panics; well-formed ones decode.
func TestRedisStoreReplies(t *testing.T) {
	l := coretest.Limit(t, "reply", model.TokenBucket, "10/s", 0, 0)
	tests := []struct {
		name    string
		reply   interface{}
		err     error
		wantErr string
		want    model.Decision
	}{
		{"allowed", "1 7.5 250000000 0 0 50000000", nil, "",
			model.Decision{Limit: l, Allowed: true, Quota: 10, Remaining: 7.5, Reset: 250 * time.Millisecond, Next: 50 * time.Millisecond}},
		{"rejected", "0 0 1e9 100000000.2 0 100000000", nil, "",
			model.Decision{Limit: l, Quota: 10, Reset: time.Second, Next: 100 * time.Millisecond, RetryAfter: 100000001}},
		{"never", "0 10 0 -1 0 0", nil, "",
			model.Decision{Limit: l, Quota: 10, Remaining: 10, RetryAfter: model.Never}},
		{"zero retry", "0 0 0 0 0 0", nil, "",
			model.Decision{Limit: l, Quota: 10, RetryAfter: 1}},
		{"beyond 18 digits", "1 1234567890123456789 0 0 0 0", nil, "",
			model.Decision{Limit: l, Allowed: true, Quota: 10, Remaining: 1234567890123456789}},
		{"nil", nil, nil, "unexpected reply", model.Decision{}},
		{"array", []interface{}{"1 0 0 0 0 0"}, nil, "unexpected reply", model.Decision{}},
		{"status", "OK", nil, "not a number", model.Decision{}},
		{"two asks' worth", "1 0 0 0 0 0,1 0 0 0 0 0", nil, "want 1 decisions of 6", model.Decision{}},
		{"short", "1 1", nil, "unexpected reply", model.Decision{}},
		{"long", "1 0 0 0 0 0 0", nil, "not a number", model.Decision{}},
		{"empty field", "1  0 0 0 0", nil, "not a number", model.Decision{}},
		{"not a number", "1 x 0 0 0 0", nil, "not a number", model.Decision{}},
		{"nan", "1 nan 0 0 0 0", nil, "not a number", model.Decision{}},
		{"minus", "1 - 0 0 0 0", nil, "not a number", model.Decision{}},
		{"error", nil, errors.New("ERR something"), "ERR something", model.Decision{}},
		{"noscript, load fails", nil, errors.New("NOSCRIPT No matching script"), "loading script", model.Decision{}},
	}
	for _, tt := range tests {
		s := newTestRedisStore(t, &fixedScripter{reply: tt.reply, err: tt.err}, false)
		out := make([]model.Decision, 1)
		err := s.Take(context.Background(), []model.Ask{{Limit: l, Key: "k", Cost: 1}}, out)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || out[0] != tt.want {
			t.Errorf("%s: %+v, %v; want %+v", tt.name, out[0], err, tt.want)
		}
	}
}

// TestUnexpectedReply: the error names the script and describes the
// reply, a string's value cut at 40 bytes.
func TestUnexpectedReply(t *testing.T) {
	long := strings.Repeat("x", 41)
	for _, c := range []struct {
		reply interface{}
		want  string
	}{
		{nil, "nil"},
		{[]interface{}{"a", int64(1)}, "array of 2"},
		{"1 2", `"1 2"`},
		{long, strconv.Quote(long[:40] + "...")},
		{int64(7), "int64 7"},
	} {
		want := "redis: unexpected reply to the peek script: " + c.want
		if err := UnexpectedReply("peek", c.reply); err == nil || err.Error() != want {
			t.Errorf("UnexpectedReply(peek, %#v) = %v, want %q", c.reply, err, want)
		}
	}
}

// TestKeySlot checks keySlot against the examples of the Redis Cluster
// specification.
func TestKeySlot(t *testing.T) {
	tests := []struct {
		key  string
		slot int
	}{
		{"123456789", 0x31C3},
		{"foo", 12182},
		{"{user1000}.following", resp.KeySlot("user1000")},
		{"foo{}{bar}", resp.KeySlot("foo{}{bar}")},
		{"foo{{bar}}zap", resp.KeySlot("{bar")},
		{"foo{bar}{zap}", resp.KeySlot("bar")},
	}
	for _, tt := range tests {
		if got := resp.KeySlot(tt.key); got != tt.slot {
			t.Errorf("resp.KeySlot(%q) = %d, want %d", tt.key, got, tt.slot)
		}
	}
}

func TestRedisStoreCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cs := resptest.NewClusterScripter(t, cluster.Addrs)
	s := newTestRedisStore(t, cs, true)
	ctx := context.Background()

	t.Run("key_slot", func(t *testing.T) {
		l := coretest.Limit(t, "slot", model.SlidingWindowLog, "5/s", 0, 0)
		for _, key := range []string{"a", "b{c}", "}{", strings.Repeat("z", 500)} {
			name := s.key(l, key)
			for _, n := range []string{name, name + ":log"} {
				v, err := cs.Nodes[0].Do(ctx, "CLUSTER", "KEYSLOT", n)
				if err != nil || v != int64(resp.KeySlot(n)) {
					t.Errorf("CLUSTER KEYSLOT %q = %v, %v; keySlot says %d", n, v, err, resp.KeySlot(n))
				}
			}
		}
	})

	t.Run("all_or_nothing_across_slots", func(t *testing.T) {
		tight := coretest.Limit(t, "tight", model.TokenBucket, "1/24h", 1, 0)
		plenty := []*model.Limit{
			coretest.Limit(t, "plenty-tb", model.TokenBucket, "1/24h", 5, 0),
			coretest.Limit(t, "plenty-lb", model.LeakyBucket, "1/24h", 5, 0),
			coretest.Limit(t, "plenty-fw", model.FixedWindow, "5/24h", 0, 0),
			coretest.Limit(t, "plenty-swc", model.SlidingWindowCounter, "5/24h", 0, 0),
			coretest.Limit(t, "plenty-swl", model.SlidingWindowLog, "5/24h", 0, 0),
		}
		key := coretest.Nonce + "/spread"
		var asks []model.Ask
		for _, l := range plenty {
			asks = append(asks, model.Ask{Limit: l, Key: key, Cost: 1})
		}
		asks = append(asks, model.Ask{Limit: tight, Key: key, Cost: 1})
		if len(s.slotGroups(asks)) < 3 {
			t.Fatalf("the asks fall in %d slots; want them spread", len(s.slotGroups(asks)))
		}
		out := make([]model.Decision, len(asks))
		for round := 0; round < 3; round++ {
			if round == 2 { // the exhausted limit first: nothing to refund
				asks = append([]model.Ask{asks[len(asks)-1]}, asks[:len(asks)-1]...)
			}
			if err := s.Take(ctx, asks, out); err != nil {
				t.Fatal(err)
			}
			for i, d := range out {
				if want := round == 0 || asks[i].Limit != tight; d.Allowed != want {
					t.Fatalf("round %d, %s: allowed %v, want %v", round, asks[i].Limit.Name, d.Allowed, want)
				}
				if round > 0 && asks[i].Limit != tight && math.Abs(d.Remaining-3) > 1e-3 {
					t.Fatalf("round %d, %s: remaining %v, want 3 (charged once before)", round, asks[i].Limit.Name, d.Remaining)
				}
			}
		}
		// Charged once (round 0) only: a single request leaves 3 of 5.
		for _, l := range plenty {
			// Redis's clock runs: allow the refill of a few seconds at 1/day.
			if d := coretest.Take(t, s, l, key, 1); !d.Allowed || math.Abs(d.Remaining-3) > 1e-3 {
				t.Errorf("%s alone after the rejected rounds: %+v, want allowed with 3 remaining", l.Name, d)
			}
		}
	})

	t.Run("race", func(t *testing.T) {
		raceLastToken(t, s, 100)
	})
}

// TestRedisScriptsWriteNothingOnError: when one ask of a call cannot be
// written (here a quota of 0, which only a tampered call can send, makes
// its expiry infinite), the scripts fail before their first write: the
// other ask is neither charged nor refunded.
func TestRedisScriptsWriteNothingOnError(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	s := newTestRedisStore(t, client, false)
	ctx := context.Background()
	good := coretest.Limit(t, "atomic-good", model.FixedWindow, "10/h", 0, 0)
	broken := coretest.Limit(t, "atomic-broken", model.TokenBucket, "10/h", 0, 0)
	key := coretest.Nonce + "/atomic"
	asks := []model.Ask{{Limit: good, Key: key, Cost: 1}, {Limit: broken, Key: key, Cost: 1}}
	tamper := func(charge bool) (keys, args []string) {
		keys, args = s.scriptArgs(asks, charge)
		args[2+6+1] = "0" // the broken ask's quota
		return keys, args
	}
	keys, args := tamper(true)
	if _, err := s.Eval(ctx, redisTake, keys, args); err == nil || !strings.Contains(err.Error(), "expiry of ask 2") {
		t.Fatalf("take: error %v, want one about the expiry of ask 2", err)
	}
	if v, err := client.Do(ctx, "EXISTS", keys[0], keys[1]); err != nil || v != int64(0) {
		t.Fatalf("after the failed take: EXISTS = %v, %v; want 0 (nothing written)", v, err)
	}
	out := make([]model.Decision, 2)
	if err := s.Take(ctx, asks, out); err != nil {
		t.Fatal(err)
	}
	keys, args = s.settleArgs(asks, out, nil)
	args[2+8+1] = "0" // the broken ask's quota
	if _, err := s.Eval(ctx, redisSettle, keys, args); err == nil || !strings.Contains(err.Error(), "expiry of settlement 2") {
		t.Fatalf("refund: error %v, want one about the expiry of settlement 2", err)
	}
	for _, k := range keys {
		if v, err := client.Do(ctx, "HGET", k, "a"); err != nil || v != "1" {
			t.Errorf("after the failed refund: HGET %s a = %v, %v; want 1 (still charged)", k, v, err)
		}
	}
}

// TestRedisStoreTTLBound: a state left ahead of a clock that stepped back
// (by 3 h, at 10/h) lives at most a second longer than its limit can need:
// a full bucket's refill or queue, one period, or two for the counter.
func TestRedisStoreTTLBound(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	s := newTestRedisStore(t, client, false)
	clock := &testclock.Clock{}
	s.clock = clock.Now
	ctx := context.Background()
	for _, alg := range model.Algorithms {
		l := coretest.Limit(t, "ttl-bound", alg, "10/h", 0, 0)
		most := int64(time.Hour/time.Millisecond) + 1000
		if alg == model.SlidingWindowCounter {
			most += int64(time.Hour / time.Millisecond)
		}
		key := coretest.Nonce + "/ttl-bound"
		clock.Set(testclock.Epoch + int64(3*time.Hour))
		coretest.Take(t, s, l, key, 1)
		clock.Set(testclock.Epoch)
		coretest.Take(t, s, l, key, 1)
		v, err := client.Do(ctx, "PTTL", s.key(l, key))
		if ms, ok := v.(int64); err != nil || !ok || ms <= 0 || ms > most {
			t.Errorf("%s: PTTL = %v, %v; want in (0, %d]", alg, v, err, most)
		}
	}
}

// TestRedisKeysSpreadWhateverTheClientKey: a client key holding braces
// cannot end the hash tag early, so keys that begin with "}" still spread
// over slots, and distinct keys stay distinct.
func TestRedisKeysSpreadWhateverTheClientKey(t *testing.T) {
	s := &Store{prefix: "sluice:"}
	l := coretest.Limit(t, "api", model.TokenBucket, "10/s", 0, 0)
	slots := map[int]bool{}
	keys := map[string]string{}
	for i := 0; i < 64; i++ {
		for _, k := range []string{"}" + strconv.Itoa(i), "{" + strconv.Itoa(i) + "}", "%7D" + strconv.Itoa(i)} {
			rk := s.key(l, k)
			if other, dup := keys[rk]; dup {
				t.Fatalf("keys %q and %q share the Redis key %q", other, k, rk)
			}
			keys[rk] = k
			if k[0] == '}' {
				slots[resp.KeySlot(rk)] = true
			}
		}
	}
	if len(slots) < 32 {
		t.Errorf("64 keys beginning with } fall in %d slots", len(slots))
	}
}

// TestRedisSettleDebtTTL: a bucket that a settlement leaves in debt
// lives, on Redis's clock, as long as its debt: a capacity of 10 at 10/h
// charged 20 lives two hours, not the hour and a second that bounds an
// ordinary bucket's state.
func TestRedisSettleDebtTTL(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	s := newTestRedisStore(t, client, false)
	ctx := context.Background()
	for _, alg := range []model.Algorithm{model.TokenBucket, model.LeakyBucket} {
		l := coretest.Limit(t, "debt-ttl-"+string(alg), alg, "10/h", 10, 0)
		l.CostHeader = "X-Cost"
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		asks := []model.Ask{{Limit: l, Key: coretest.Nonce + "/debt", Cost: 10}}
		out := make([]model.Decision, 1)
		if err := s.Take(ctx, asks, out); err != nil || !out[0].Allowed {
			t.Fatalf("%s: %+v, %v", alg, out[0], err)
		}
		if err := s.Settle(ctx, asks, out, []float64{20}); err != nil {
			t.Fatal(err)
		}
		ms, err := client.Do(ctx, "PTTL", s.key(l, asks[0].Key))
		if err != nil || ms.(int64) < int64(2*time.Hour/time.Millisecond)-5000 {
			t.Errorf("%s: PTTL %v, %v; want two hours", alg, ms, err)
		}
	}
}
