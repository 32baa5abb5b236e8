// Package redisstore keeps the engine's per-key states in Redis (5.0 or
// newer), standalone, behind Sentinel or in a Cluster, shared by every
// instance that uses the same server and prefix: each decision is one
// EVALSHA of a Lua script that mirrors the algorithms of package model,
// on Redis's clock. It also counts requests in flight by leases that
// expire (inflight.go), checks the settings of a Redis connection, and
// lends package core/inspect its hooks (peek.go). Its clients are
// go-redis in Caddy and core/resp in the Traefik plugin, both through
// model.Scripter.
//
// It imports the standard library only, so that Traefik's Yaegi
// interpreter can run it unchanged.
package redisstore

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/resp"
)

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "sluice:"

// DefaultTimeout is both adapters' default bound on one decision by a
// Store (GateConfig.Timeout), connecting included: past it the
// request is decided by the fallback or the failure policy. A limiter
// should add little to a request's latency, and a healthy Redis on the
// same network answers in about a millisecond.
const DefaultTimeout = 100 * time.Millisecond

// CheckDB is both adapters' check of a Redis database number: not
// negative, and 0 for a Cluster, which has no other. (A database number
// that a host ignored would silently merge keys that the configuration
// meant to keep apart.) Its error is a *FieldError of the field "db".
func CheckDB(db int, cluster bool) error {
	if db < 0 {
		return model.Refuse("db", strconv.Itoa(db), "must not be negative")
	}
	if db != 0 && cluster {
		return model.Refuse("db", strconv.Itoa(db), "a Redis Cluster has only database 0")
	}
	return nil
}

// CheckAddress checks that addr is a host:port; its error is a
// *FieldError of the field "address", which the host names as the option
// it read addr from.
func CheckAddress(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return model.Refuse("address", addr, "want host:port")
	}
	return nil
}

// CheckUser checks that a username comes with a password: an ACL
// user authenticates with both. Its error is a *FieldError of "username".
func CheckUser(username, password string) error {
	if username != "" && password == "" {
		return model.Refuse("username", "", "needs a password (an ACL user authenticates with both)")
	}
	return nil
}

// CheckSentinel checks the master set's name and the Sentinels'
// addresses of a store behind Redis Sentinel: both required, and each
// address a host:port. Its error is a *FieldError of "sentinel.master" or
// "sentinel.addresses".
func CheckSentinel(master string, addrs []string) error {
	if master == "" {
		return model.Refuse("sentinel.master", "", "required, the name of the master set")
	}
	if len(addrs) == 0 {
		return model.Refuse("sentinel.addresses", "", "at least one Sentinel host:port is required")
	}
	for _, a := range addrs {
		if err := CheckAddress(a); err != nil {
			fe := err.(*model.FieldError)
			fe.Field = "sentinel.addresses"
			return fe
		}
	}
	return nil
}

// CheckPrefix checks a Config.Prefix: no braces, which would
// change the keys' Cluster hash tags. Its error is a *FieldError of
// "prefix".
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return model.Refuse("prefix", prefix, "must not contain braces")
	}
	return nil
}

// Config configures a Store.
type Config struct {
	// Client runs the scripts. Required.
	Client model.Scripter
	// Prefix begins every key the store writes; empty means
	// DefaultPrefix. It must not contain braces, which would change
	// the keys' Cluster hash tags.
	Prefix string
	// ReadableKeys puts the client's key itself (bounded by BoundKey) in
	// the names of the Redis keys, for debugging; by default they carry a
	// digest of it, so that Redis holds no client address or API key.
	ReadableKeys bool
	// Cluster says that Client is a Redis Cluster, where one script may
	// only touch keys of one hash slot. Asks whose keys fall in several
	// slots are then decided by check-then-refund instead of one script;
	// see Store.Take.
	Cluster bool
	// Clock, when not nil, supplies the instants at which the scripts
	// decide, instead of Redis's clock (TIME), for tests that drive time,
	// as MemoryConfig.Clock does. Redis still measures the keys' time to
	// live, which then lasts at least a minute (see luaPrelude).
	Clock model.Clock
	// Direct, when not nil, holds the *resp.Client that Client runs
	// scripts on while connected to a standalone server (nil otherwise),
	// for a Gate's decisions to reach it without Client: see Direct.
	// A *resp.Client given as Client is so used by itself.
	Direct *Direct
}

// Direct holds the standalone RESP client, if any, that a Store
// may call itself for a Gate's common decision: one ask of cost 1, with the
// default prefix and digested keys. The store then sends that decision's
// script call, encoded once per limit but for the key's digest, straight
// to the client, and reads its reply; under Yaegi this costs a fraction of
// a call through the Scripter interface into interpreted code, and of
// encoding the call anew. Everything else goes through the store's
// Client: other decisions, and a decision the client cannot make at once
// (it is closed, or the server does not know the script). The zero value
// holds no client.
type Direct struct {
	mu     sync.Mutex
	client *resp.Client
}

// Client returns the client d holds, nil for none.
func (d *Direct) Client() *resp.Client {
	d.mu.Lock()
	c := d.client
	d.mu.Unlock()
	return c
}

// Set makes d hold c, nil for none: the client that the store's Client
// runs scripts on, as long as it does.
func (d *Direct) Set(c *resp.Client) {
	d.mu.Lock()
	d.client = c
	d.mu.Unlock()
}

// Store is a Store kept in Redis (5.0 or newer) or Redis Cluster, shared
// by every instance that uses the same server and prefix.
//
// Each Take is one EVALSHA of one Lua script that reads the states, decides
// every ask and, only if all of them allow, writes the new states: the
// read-modify-write is atomic on the server, so concurrent instances never
// admit more than a limit allows. The scripts mirror model.Step and
// model.Settle exactly (see redis_lua.go). They are sent by SHA-1; when the
// server does not know a script (first use, SCRIPT FLUSH, restart,
// failover), the store loads it and retries once.
//
// # Clock
//
// Instants come from Redis's clock (the TIME command), read once per
// script, never from the application servers, whose clock skew is thus
// irrelevant. TIME ticks in microseconds, so RetryAfter is rounded up to a
// whole microsecond (waiting it is always enough); otherwise the scripts
// compute in nanoseconds like model.Step, exactly: Lua's doubles cannot
// hold Unix nanoseconds (about 2^60), so the scripts count from the current
// second. Window boundaries are exact for periods that are a whole number of
// microseconds (any rate written with ms, s, m, h or d).
//
// # Keys
//
// The state of (limit, key) is a hash at
//
//	Prefix + "{" + limit.Namespace() + ":" + "#" + digest(key) + "}"
//
// digest being the first 32 hexadecimal digits of the key's SHA-256, so that
// whoever can read Redis sees no client's address or API key (a digest can
// still be matched against guesses: an IPv4 address is one of 2³²); with
// Config.ReadableKeys, BoundKey(key) stands in its place, with any
// "{", "}" and "%" written %7B, %7D and %25. The hash holds decimal
// strings: t, State.T as "<Unix seconds> <nanoseconds>"
// (for the window algorithms, the current window's start, an instant like
// the others', so that a limit whose period changes under the same name
// keeps its counters as in a MemoryStore); a and b (State.A and State.B). A
// sliding window log keeps its entries, "<seconds> <nanoseconds> <cost>"
// oldest first, in a list at the same key followed by ":log". The braces
// make the (limit, key) a Cluster hash tag: its keys share a slot, while
// different clients spread over the cluster. Every key expires (PEXPIRE)
// when its state becomes equivalent to a fresh one (model.Expires), at least
// 1 ms after its last write, so idle clients cost no memory, and at most a
// second longer than its limit can need (a full bucket's refill or queue,
// two windows, one period), even when a clock that stepped back left the
// state ahead of it.
type Store struct {
	client   model.Scripter
	prefix   string
	cluster  bool
	readable bool
	// direct is Config.Direct, nil unless the store uses the default
	// prefix and digested keys, those of DirectTake.
	direct *Direct
	// clock is Config.Clock: when set (by tests only), it supplies
	// the instants instead of Redis's clock.
	clock model.Clock
	// leases are the leases of limits with a Lease (see lease.go).
	leases leases
}

// New returns a store that keeps its states through cfg.Client.
// It does not contact the server: scripts are loaded at first use.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("redis: client is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := CheckPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	direct := cfg.Direct
	if c, ok := cfg.Client.(*resp.Client); ok && direct == nil {
		direct = &Direct{client: c}
	}
	if cfg.Prefix != DefaultPrefix || cfg.ReadableKeys || cfg.Cluster {
		direct = nil
	}
	return &Store{client: cfg.Client, prefix: cfg.Prefix, cluster: cfg.Cluster, readable: cfg.ReadableKeys, direct: direct, clock: cfg.Clock}, nil
}

// Script is a Lua script's text and its SHA-1, the name by which
// Store.Eval runs it.
type Script struct {
	src, sha string
}

// NewScript returns the script src, its SHA-1 computed once.
func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	redisTake   = NewScript(redisTakeScript)
	redisSettle = NewScript(redisSettleScript)
)

// ReplyFields is the number of fields of one decision in the take
// script's reply.
const ReplyFields = 6

// Take implements Store. On a standalone server, and in a Cluster when all
// keys share a hash slot, it is one script call: all-or-nothing and atomic.
//
// In a Cluster, asks whose keys fall in several slots are taken by
// check-then-refund: the asks of each slot are taken in turn by one script
// call; at the first rejection the asks already charged are refunded and the
// remaining ones are decided without being charged. Meanwhile a concurrent
// request may see the refunded capacity as taken, and be rejected although
// the first request was not admitted. If a call fails after others
// succeeded, their charges are refunded before Take returns the error; if
// that refund fails too, the error says so and those charges remain.
//
// Asks of a limit with a Lease are admitted from the lease the store holds
// of their key when it covers them, and otherwise ask Redis for the next
// one (see lease.go).
func (s *Store) Take(ctx context.Context, asks []model.Ask, out []model.Decision) error {
	_, err := s.TakeAsked(ctx, asks, out)
	return err
}

// TakeAsked is Take, and reports whether it asked Redis: false when the
// leases the store holds admitted every ask (or there was none), so that
// no answer of Redis stands behind the decisions, which a circuit breaker
// in front of Redis must then not count as one. When it asked, err is
// what Redis's answer, or its failure, left.
func (s *Store) TakeAsked(ctx context.Context, asks []model.Ask, out []model.Decision) (asked bool, err error) {
	if len(asks) == 0 {
		return false, nil
	}
	for i := range asks {
		if asks[i].Limit.Lease > 0 {
			return s.takeLeased(ctx, asks, out)
		}
	}
	return true, s.take(ctx, asks, out)
}

// take is Take without leases.
func (s *Store) take(ctx context.Context, asks []model.Ask, out []model.Decision) error {
	if !s.cluster || len(asks) == 1 {
		return s.takeAsks(ctx, asks, out, true)
	}
	return s.takeSlots(ctx, asks, out)
}

// Direct returns the Direct that a Lane may send the store's take
// script calls to (see DirectTake): nil when the store has none, or
// decides on a clock of its own (Config.Clock) rather than Redis's.
func (s *Store) Direct() *Direct {
	if s.clock != nil {
		return nil
	}
	return s.direct
}

// TakeFailed finishes a take script call that a Lane sent to the store's
// Direct client, which failed with err, timeout after start at most:
// a closed client sent nothing, so Take sends the call again through the
// store's Client, which connects again; any other error is what
// evalFailed makes of it, after loading the script and running it again
// if the server did not know it. A call that may have run is never sent
// twice.
func (s *Store) TakeFailed(ctx context.Context, start time.Time, timeout time.Duration, asks []model.Ask, out []model.Decision, err error) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(timeout))
		defer cancel()
	}
	if err == resp.ErrClosed {
		return s.Take(ctx, asks, out)
	}
	keys, args := s.scriptArgs(asks, true)
	reply, err := s.evalFailed(ctx, redisTake, keys, args, err)
	if err != nil {
		return err
	}
	return DecodeDecisions(reply, asks, out)
}

// takeSlots is Take for several asks in a Cluster. It is apart from Take,
// which holds the common case: under Yaegi every call pays for every value
// of the called function's body.
func (s *Store) takeSlots(ctx context.Context, asks []model.Ask, out []model.Decision) error {
	groups := s.slotGroups(asks)
	if len(groups) == 1 {
		return s.takeAsks(ctx, asks, out, true)
	}
	for i, g := range groups {
		sub, dec := pickAsks(asks, g), make([]model.Decision, len(g))
		if err := s.takeAsks(ctx, sub, dec, true); err != nil {
			if rerr := s.settleGroups(ctx, asks, out, nil, groups[:i]); rerr != nil {
				return fmt.Errorf("%w (and refunding the asks already charged failed: %v)", err, rerr)
			}
			return err
		}
		all := true
		for j, k := range g {
			out[k] = dec[j]
			all = all && dec[j].Allowed
		}
		if all {
			continue
		}
		if err := s.settleGroups(ctx, asks, out, nil, groups[:i]); err != nil {
			return fmt.Errorf("redis: refunding the asks charged before a rejection: %w", err)
		}
		for _, g := range groups[i+1:] {
			sub, dec := pickAsks(asks, g), make([]model.Decision, len(g))
			if err := s.takeAsks(ctx, sub, dec, false); err != nil {
				return err
			}
			for j, k := range g {
				out[k] = dec[j]
			}
		}
		return nil
	}
	return nil
}

// Refund implements Store. It gives back each ask's cost as model.Settle
// does, on the server's clock; states that no longer exist are left alone.
func (s *Store) Refund(ctx context.Context, asks []model.Ask, charged []model.Decision) error {
	return s.Settle(ctx, asks, charged, nil)
}

// Settle implements Store: one script call, or in a Cluster one per hash
// slot, each atomic, on the server's clock. A nil actual gives back every
// cost (Refund).
func (s *Store) Settle(ctx context.Context, asks []model.Ask, charged []model.Decision, actual []float64) error {
	if len(asks) == 0 {
		return nil
	}
	if !s.cluster || len(asks) == 1 {
		return s.settleAsks(ctx, asks, charged, actual)
	}
	return s.settleGroups(ctx, asks, charged, actual, s.slotGroups(asks))
}

// takeAsks runs the take script once for asks, charging them all if they
// all allow and charge is set, and decodes the decisions into out.
func (s *Store) takeAsks(ctx context.Context, asks []model.Ask, out []model.Decision, charge bool) error {
	keys, args := s.scriptArgs(asks, charge)
	reply, err := s.Eval(ctx, redisTake, keys, args)
	if err != nil {
		return err
	}
	return DecodeDecisions(reply, asks, out)
}

// settleAsks runs the settle script once for asks, whose charges are
// charged, at actual (nil: zero each).
func (s *Store) settleAsks(ctx context.Context, asks []model.Ask, charged []model.Decision, actual []float64) error {
	keys, args := s.settleArgs(asks, charged, actual)
	_, err := s.Eval(ctx, redisSettle, keys, args)
	return err
}

// settleArgs builds the KEYS and ARGV of a settle script call for asks,
// whose charges are charged, at actual (nil: zero each): scriptArgs'
// with each ask's cost replaced by its settlement, actual − cost, and
// followed by the mark of its charge, "<Unix seconds> <nanoseconds>" and
// its number (see luaSettleMain), or two empty strings for none.
func (s *Store) settleArgs(asks []model.Ask, charged []model.Decision, actual []float64) (keys, args []string) {
	keys, six := s.scriptArgs(asks, false)
	args = make([]string, 0, len(six)+2*len(asks))
	args = append(args, six[:2]...)
	for i := range asks {
		diff := -asks[i].Cost
		if actual != nil {
			diff += actual[i]
		}
		args = append(args, six[2+6*i:7+6*i]...)
		args = append(args, model.FormatFloat(diff))
		if m := &charged[i].Mark; m.OK {
			args = append(args, clockArg(m.T), model.FormatFloat(m.A))
		} else {
			args = append(args, "", "")
		}
	}
	return keys, args
}

// settleGroups settles the asks of every group, one script call per
// group, and returns the first error after trying them all.
func (s *Store) settleGroups(ctx context.Context, asks []model.Ask, charged []model.Decision, actual []float64, groups [][]int) error {
	var first error
	for _, g := range groups {
		var sub []float64
		if actual != nil {
			sub = make([]float64, len(g))
			for j, k := range g {
				sub[j] = actual[k]
			}
		}
		if err := s.settleAsks(ctx, pickAsks(asks, g), pickDecisions(charged, g), sub); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Eval runs script on the store's client with keys and args (EVALSHA),
// loading it (SCRIPT LOAD) and retrying once if the server does not know
// it, as the store runs its own scripts; its errors begin with "redis: ".
// In a Cluster, keys choose the node, and must share a hash slot.
func (s *Store) Eval(ctx context.Context, script *Script, keys, args []string) (interface{}, error) {
	reply, err := s.client.EvalSha(ctx, script.sha, keys, args)
	if err != nil {
		return s.evalFailed(ctx, script, keys, args, err)
	}
	return reply, nil
}

// evalFailed finishes Eval after EvalSha failed with err: it loads
// the script and runs it again if the server did not know it.
func (s *Store) evalFailed(ctx context.Context, script *Script, keys, args []string, err error) (interface{}, error) {
	if !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if _, lerr := s.client.ScriptLoad(ctx, script.src); lerr != nil {
		return nil, fmt.Errorf("redis: loading script: %w", lerr)
	}
	reply, err := s.client.EvalSha(ctx, script.sha, keys, args)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return reply, nil
}

// scriptArgs builds the KEYS and ARGV of a script call: ARGV[1] the instant
// as "<Unix seconds> <nanoseconds>" (empty for Redis's clock), ARGV[2] "2"
// to charge, marking every admission (see luaTakeMain), then six values per ask (algorithm, quota, period in ns,
// capacity, max delay in ns, cost), and one key per ask, two for a sliding
// window log. All but the algorithm and the cost are the limit's Params.
func (s *Store) scriptArgs(asks []model.Ask, charge bool) (keys, args []string) {
	keys = make([]string, 0, len(asks)+1)
	args = make([]string, 2, 2+6*len(asks))
	if s.clock != nil {
		args[0] = clockArg(s.clock())
	}
	args[1] = "0"
	if charge {
		args[1] = "2"
	}
	for i := range asks {
		a := &asks[i]
		key := s.key(a.Limit, a.Key)
		keys = append(keys, key)
		if a.Limit.Algorithm == model.SlidingWindowLog {
			keys = append(keys, key+":log")
		}
		cost := "1"
		if a.Cost != 1 {
			cost = model.FormatFloat(a.Cost)
		}
		p := a.Limit.Params()
		args = append(args, algorithmArg(a.Limit), p[0], p[1], p[2], p[3], cost)
	}
	return keys, args
}

// clockArg is the instant ns as scriptArgs passes it.
func clockArg(ns int64) string {
	sec := floorDiv(ns, 1e9)
	return strconv.FormatInt(sec, 10) + " " + strconv.FormatInt(ns-sec*1e9, 10)
}

// DirectTake is the whole EVALSHA of the take script for one ask of l of
// cost 1, encoded, as a Lane sends it through a Direct client: for a
// store with the default prefix and digested keys, on Redis's clock,
// charging and marking only delayed admissions (ARGV[2] "1", see
// luaTakeMain). The key's digest is missing: its 32 hexadecimal digits go
// at take[hole:] (and at take[hole2:] for the second key of a sliding
// window log, 0 otherwise), where take holds zeros.
func DirectTake(l *model.Limit) (take string, hole, hole2 int) {
	head := DefaultPrefix + "{" + l.Namespace() + ":#"
	key := head + strings.Repeat("0", 32) + "}"
	args := []string{"EVALSHA", redisTake.sha, "1", key}
	log := l.Algorithm == model.SlidingWindowLog
	if log {
		args = append(args, key+":log")
		args[2] = "2"
	}
	p := l.Params()
	args = append(args, "", "1", algorithmArg(l), p[0], p[1], p[2], p[3], "1")
	take = string(resp.AppendCommand(nil, args...))
	// The first "sluice:{" is the key's: what precedes is digits, EVALSHA
	// and the SHA-1 in hexadecimal.
	hole = strings.Index(take, head) + len(head)
	if log {
		hole2 = hole + strings.Index(take[hole:], head) + len(head)
	}
	return take, hole, hole2
}

// key is the hash holding the state of (l, key).
func (s *Store) key(l *model.Limit, key string) string {
	if s.readable {
		return s.prefix + "{" + l.Namespace() + ":" + tagSafe(keyspec.BoundKey(key)) + "}"
	}
	if len(key) > keyspec.MaxKeyLength {
		return s.prefix + "{" + l.Namespace() + ":" + keyspec.BoundKey(key) + "}"
	}
	sum := sha256.Sum256([]byte(key)) // BoundKey's digest, without its chunk buffer
	return s.prefix + "{" + l.Namespace() + ":#" + hex.EncodeToString(sum[:16]) + "}"
}

// tagSafe escapes the braces of a client's key, and the escape byte, as
// %7B, %7D and %25, so that the hash tag of its Redis key is the whole
// (limit, key): a "}" in a client-chosen key would otherwise end the tag
// early, and every key that begins with it would share one slot, pinning a
// limit's load on one Cluster master.
func tagSafe(key string) string {
	if !strings.ContainsAny(key, "{}%") {
		return key
	}
	return tagEscaper.Replace(key)
}

var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// algorithmArg is the argument that names l's algorithm to the scripts:
// its code, followed by + for a limit with a cost from the response (its
// state may be in debt) and, for a limit with a Penalty, by a space and
// the penalty in nanoseconds (see asks in lua.go).
func algorithmArg(l *model.Limit) string {
	code := redisAlgorithmCode(l.Algorithm)
	if l.CostHeader != "" || l.CostBytes {
		code += "+"
	}
	if l.Penalty != 0 {
		return code + " " + strconv.FormatInt(int64(l.Penalty), 10)
	}
	return code
}

// redisAlgorithmCode is an algorithm's name in the scripts.
func redisAlgorithmCode(a model.Algorithm) string {
	switch a {
	case model.LeakyBucket:
		return "lb"
	case model.FixedWindow:
		return "fw"
	case model.SlidingWindowCounter:
		return "swc"
	case model.SlidingWindowLog:
		return "swl"
	}
	return "tb"
}

// DecodeDecisions decodes the take script's reply into out[:len(asks)]:
// a string of one decision per ask, separated by commas, each of
// ReplyFields numbers separated by spaces (see luaTakeMain), and
// after an admission the script charged, its mark.
func DecodeDecisions(reply interface{}, asks []model.Ask, out []model.Decision) error {
	text, ok := reply.(string)
	if !ok {
		return badTakeReply(reply, -1)
	}
	p := 0
	for i := range asks {
		var err error
		if p, err = decodeAsk(reply, text, asks, out, i, p); err != nil {
			return err
		}
	}
	if p != len(text)+1 {
		return badTakeReply(reply, len(asks))
	}
	return nil
}

// badTakeReply is the error of a take script reply that is not a string
// (asks < 0) or does not hold the decisions of asks asks.
func badTakeReply(reply interface{}, asks int) error {
	if asks < 0 {
		return fmt.Errorf("redis: unexpected reply to the take script: %s, want a string", describeReply(reply))
	}
	return fmt.Errorf("redis: unexpected reply to the take script: %s, want %d decisions of %d numbers", describeReply(reply), asks, ReplyFields)
}

// decodeAsk decodes the decision of ask i, which starts at text[p:], into
// out[i] for DecodeDecisions, and returns the start of the next one: whole
// numbers of up to 18 digits by hand, others by replyNumber.
func decodeAsk(reply interface{}, text string, asks []model.Ask, out []model.Decision, i, p int) (int, error) {
	var f [ReplyFields]float64
	for j := 0; j < ReplyFields; j++ {
		// The field is text[p:q], ended by a space, or by a comma
		// or the end after the last field of an ask.
		end := byte(' ')
		if j == ReplyFields-1 {
			end = ','
		}
		if p > len(text) {
			return 0, badTakeReply(reply, len(asks))
		}
		q, n, whole := p, int64(0), true
		if q < len(text) && text[q] == '-' {
			q++
		}
		for ; q < len(text) && text[q] != end && (end != ',' || text[q] != ' '); q++ {
			d := text[q] - '0'
			if d > 9 || q-p >= 18 {
				whole = false
			}
			n = n*10 + int64(d)
		}
		if whole && q > p && text[p] != '-' {
			f[j] = float64(n)
		} else if x, err := replyNumber(text[p:q]); err == nil {
			f[j] = x
		} else {
			return 0, fmt.Errorf("redis: unexpected reply to the take script: %s: ask %d, field %d: %w", describeReply(reply), i, j, err)
		}
		p = q + 1
	}
	var m model.Mark
	if p-1 < len(text) && text[p-1] == ' ' { // the mark of a charge
		var err error
		if m, p, err = decodeMark(text, p); err != nil {
			return 0, fmt.Errorf("redis: unexpected reply to the take script: %s: ask %d, mark: %w", describeReply(reply), i, err)
		}
	}
	l := asks[i].Limit
	d := model.Decision{
		Limit:     l,
		Allowed:   f[0] == 1,
		Quota:     l.Rate.Quota,
		Remaining: model.NonNegative(f[1]),
		Reset:     model.DurationOf(f[2]),
		Next:      model.DurationOf(f[5]),
	}
	if d.Allowed {
		d.Delay = model.DurationOf(f[4])
		d.Mark = m
	} else {
		d.RetryAfter = model.Never
		if f[3] >= 0 {
			d.RetryAfter = model.DurationOf(f[3])
		}
		if d.RetryAfter == 0 {
			d.RetryAfter = 1
		}
	}
	out[i] = d
	return p, nil
}

// decodeMark reads the mark that the take script appends to an admission
// it charged, "<Unix seconds> <nanoseconds> <A>" from text[p:] up to a
// comma or the end, and returns it with the index after that comma.
func decodeMark(text string, p int) (model.Mark, int, error) {
	q := strings.IndexByte(text[p:], ',')
	if q < 0 {
		q = len(text)
	} else {
		q += p
	}
	f := strings.Fields(text[p:q])
	if len(f) != 3 {
		return model.Mark{}, 0, fmt.Errorf("not a number: %q, want 3 numbers", text[p:q])
	}
	sec, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return model.Mark{}, 0, err
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return model.Mark{}, 0, err
	}
	a, err := replyNumber(f[2])
	if err != nil {
		return model.Mark{}, 0, err
	}
	return model.Mark{T: sec*1e9 + ns, A: a, OK: true}, q + 1, nil
}

// replyNumber reads a number the scripts return as an integer or as a
// decimal string.
func replyNumber(v interface{}) (float64, error) {
	switch x := v.(type) {
	case int64:
		return float64(x), nil
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil || math.IsNaN(f) {
			return 0, fmt.Errorf("not a number: %q", x)
		}
		return f, nil
	}
	return 0, fmt.Errorf("not a number: %s", describeReply(v))
}

// describeReply names a reply's type and, for short ones, its value, for
// error messages.
func describeReply(v interface{}) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case []interface{}:
		return "array of " + strconv.Itoa(len(x))
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return strconv.Quote(x)
	}
	return fmt.Sprintf("%T %v", v, v)
}

// floorDiv is a/b rounded towards negative infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// slotGroups partitions asks by the Cluster hash slot of their keys, in
// order of first appearance: indexes into asks.
func (s *Store) slotGroups(asks []model.Ask) [][]int {
	var groups [][]int
	var slots []int
	for i := range asks {
		slot := resp.KeySlot(s.key(asks[i].Limit, asks[i].Key))
		j := 0
		for j < len(slots) && slots[j] != slot {
			j++
		}
		if j == len(slots) {
			slots = append(slots, slot)
			groups = append(groups, []int{i})
			continue
		}
		groups[j] = append(groups[j], i)
	}
	return groups
}

// pickAsks returns the asks at the indexes idx.
func pickAsks(asks []model.Ask, idx []int) []model.Ask {
	sub := make([]model.Ask, len(idx))
	for j, k := range idx {
		sub[j] = asks[k]
	}
	return sub
}

// pickDecisions returns the decisions at the indexes idx.
func pickDecisions(out []model.Decision, idx []int) []model.Decision {
	sub := make([]model.Decision, len(idx))
	for j, k := range idx {
		sub[j] = out[k]
	}
	return sub
}

var _ model.Store = (*Store)(nil)
