// Package redisfloor is a Traefik plugin that measures about the least a
// token bucket decided in Redis and answering with sluice's five rate-limit
// headers costs under Yaegi.
//
// Each request sends one EVALSHA of a token bucket script (on Redis's
// clock, as sluice's) over a connection taken from a pool, reads its reply
// and, on an admission, writes RateLimit-Policy, RateLimit and the
// X-RateLimit trio. It is shaped the way sluice's hot path is (its
// variables are parameters, the standard library is called through
// package variables), so that nothing but the work itself is counted.
//
// It has none of sluice's guarantees: no timeout, breaker, failure policy,
// fallback, Cluster or Sentinel, no reload of the script after NOSCRIPT,
// no check of the address, no fractional costs, and a rejection is a bare
// 429. It exists only to be measured beside sluice, by bench/yaegi: what
// sluice's Redis path costs above it is the price of those guarantees under
// the interpreter.
package redisfloor

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is the limit, Average requests per second (counted in
// microseconds: above 1,000,000 it is 1,000,000) and Burst at once, and
// the Redis server's host:port.
type Config struct {
	Average int64
	Burst   int64
	Address string
}

// CreateConfig returns an empty configuration.
func CreateConfig() *Config { return &Config{} }

// script is a token bucket on Redis's clock, in microseconds: KEYS[1]
// holds the theoretical arrival time; ARGV are the microseconds per token
// and of the whole burst. It returns {admitted, remaining, deficit µs}.
const script = `
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
tat = tat + tonumber(ARGV[1])
local deficit = tat - now
if deficit > tonumber(ARGV[2]) then return {0, 0, deficit} end
redis.call('SET', KEYS[1], tat, 'PX', math.ceil(deficit / 1000) + 1)
return {1, math.floor((tonumber(ARGV[2]) - deficit) / tonumber(ARGV[1])), deficit}
`

type conn struct {
	nc  net.Conn
	buf []byte    // the command
	rb  [256]byte // the reply
}

type handler struct {
	next      http.Handler
	addr      string
	prefix    string // of the keys: the middleware's name
	mu        sync.Mutex
	idle      []*conn
	head      string // *6, EVALSHA, the sha and 1 (one key)
	tail      string // the two arguments
	emission  int64  // µs per token
	base      time.Time
	wall      int64 // base in s since the epoch
	policy    string
	limitText string
}

// New returns the plugin's handler in front of next, having loaded the
// script on a first connection.
func New(ctx context.Context, next http.Handler, config *Config, name string) (http.Handler, error) {
	if config.Average < 1 || config.Burst < 1 || config.Address == "" {
		return nil, errors.New("redisfloor: average, burst and address are required")
	}
	h := &handler{next: next, addr: config.Address, prefix: name + ":", base: time.Now()}
	h.wall = h.base.Unix()
	h.emission = int64(time.Second/time.Microsecond) / config.Average
	if h.emission < 1 {
		h.emission = 1
	}
	c, err := h.dial()
	if err != nil {
		return nil, err
	}
	sha, err := loadScript(c)
	if err != nil {
		c.nc.Close()
		return nil, err
	}
	h.idle = append(h.idle, c)
	h.head = string(appendBulks(nil, "EVALSHA", sha, "1"))
	h.head = "*6" + h.head[2:] // the key and the two arguments follow
	h.tail = string(appendBulks(nil, strconv.FormatInt(h.emission, 10), strconv.FormatInt(h.emission*config.Burst, 10)))
	h.tail = h.tail[strings.IndexByte(h.tail, '\n')+1:] // without the *2 line
	h.limitText = strconv.FormatInt(config.Average, 10)
	h.policy = `"default";q=` + h.limitText + ";w=1"
	return h, nil
}

// loadScript loads the script on c and returns its sha.
func loadScript(c *conn) (string, error) {
	if _, err := c.nc.Write(appendBulks(nil, "SCRIPT", "LOAD", script)); err != nil {
		return "", err
	}
	r := bufio.NewReader(c.nc)
	line, err := r.ReadString('\n')
	if err != nil || line != "$40\r\n" { // the sha, 40 hex digits
		return "", errors.New("redisfloor: SCRIPT LOAD: " + strings.TrimSpace(line))
	}
	sha, err := r.ReadString('\n')
	return strings.TrimSpace(sha), err
}

// appendBulks appends args to b as one RESP command.
func appendBulks(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

func (h *handler) dial() (*conn, error) {
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc}, nil
}

// Constants of other packages, as constants of this one: under Yaegi a
// constant of another package takes a slot of every call's frame.
const (
	micro                 = int64(time.Second / time.Microsecond)
	second                = int64(time.Second)
	statusTooManyRequests = http.StatusTooManyRequests
	statusBadGateway      = http.StatusBadGateway
)

// The standard library functions of serve, as package variables: under
// Yaegi a selector of another package takes a slot of every call's frame.
var (
	fmtInt        = strconv.FormatInt
	lastIndexByte = strings.LastIndexByte
	timeSince     = time.Since
)

// lenTexts are "$<n>\r\n" for the lengths of keys up to 127 bytes.
var lenTexts = func() (t [128]string) {
	for i := range t {
		t[i] = "$" + strconv.Itoa(i) + "\r\n"
	}
	return t
}()

// headerNames are the headers of an admission, in the order of serve's
// values, as net/http's canonical keys.
var headerNames = [5]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}

var errReply = errors.New("redisfloor: unexpected reply")

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serve(h, w, r, "", "", nil, nil, 0, 0, 0, 0, 0, 0, 0, nil, nil, nil)
}

// serve decides r in Redis. Its parameters after r are its variables,
// passed as zero: under Yaegi a parameter costs its slot, a := one more
// allocation each time it runs. The reply, "*3", then three integers
// that are not negative, is read and parsed here, without bufio, whose
// calls would cost more than the loop.
func serve(h *handler, w http.ResponseWriter, r *http.Request,
	key, remText string, c *conn, v *int64, ok, rem, deficit, t int64, n, got, i int, vals []string, hd http.Header, err error) {
	key = r.RemoteAddr
	key = h.prefix + key[:lastIndexByte(key, ':')] // the host, as net/http writes it
	// A pool under a mutex: under Yaegi v0.16.1, a select that receives
	// into a variable declared before it panics (reflect.Select: invalid
	// Dir).
	h.mu.Lock()
	if len(h.idle) > 0 {
		c = h.idle[len(h.idle)-1]
		h.idle = h.idle[:len(h.idle)-1]
	}
	h.mu.Unlock()
	if c == nil {
		if c, err = h.dial(); err != nil {
			w.WriteHeader(statusBadGateway)
			return
		}
	}
	c.buf = append(c.buf[:0], h.head...)
	if len(key) < len(lenTexts) {
		c.buf = append(c.buf, lenTexts[len(key)]...)
	} else {
		c.buf = append(c.buf, "$"+fmtInt(int64(len(key)), 10)+"\r\n"...)
	}
	c.buf = append(c.buf, key...)
	c.buf = append(c.buf, "\r\n"...)
	c.buf = append(c.buf, h.tail...)
	if _, err = c.nc.Write(c.buf); err == nil {
		// Until the four lines are in: the reply is small.
		for n < 4 && err == nil {
			if i, err = c.nc.Read(c.rb[got:]); err == nil {
				for i += got; got < i; got++ {
					if c.rb[got] == '\n' {
						n++
					}
				}
				if got == len(c.rb) && n < 4 {
					err = errReply
				}
			}
		}
	}
	if err == nil && c.rb[0] != '*' {
		err = errReply
	}
	if err != nil {
		c.nc.Close()
		w.WriteHeader(statusBadGateway)
		return
	}
	// The three integers: after each ':', the digits.
	n = 0
	for i = 0; i < got; i++ {
		switch c.rb[i] {
		case ':':
			n++
			switch n {
			case 1:
				v = &ok
			case 2:
				v = &rem
			default:
				v = &deficit
			}
		case '\r', '\n':
			v = nil
		default:
			if v != nil {
				*v = *v*10 + int64(c.rb[i]-'0')
			}
		}
	}
	h.mu.Lock()
	h.idle = append(h.idle, c)
	h.mu.Unlock()
	if ok == 0 {
		w.WriteHeader(statusTooManyRequests)
		return
	}
	remText = fmtInt(rem, 10)
	// t: the seconds to the next whole token.
	t = deficit % h.emission
	if t == 0 {
		t = h.emission
	}
	t += micro - 1
	t /= micro
	// X-RateLimit-Reset: the second the bucket is whole again.
	deficit += micro - 1
	deficit /= micro
	deficit += int64(timeSince(h.base)) / second
	deficit += h.wall
	vals = []string{h.policy, `"default";r=` + remText + ";t=" + fmtInt(t, 10), h.limitText, remText, fmtInt(deficit, 10)}
	hd = w.Header()
	for i = 0; i < len(vals); i++ {
		hd[headerNames[i]] = vals[i : i+1 : i+1]
	}
	h.next.ServeHTTP(w, r)
}
