package caddymodule

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
)

// warnInterval is the least time between two store-error warnings of one
// handler; the errors in between are counted and reported with the next.
const warnInterval = time.Second

// warnLimiter lets through at most one warning per warnInterval, counting
// the others. It needs no goroutine: the first warning due after the
// interval reports how many were suppressed. The zero value is ready.
type warnLimiter struct {
	last       atomic.Int64 // Unix nanoseconds of the last warning let through
	suppressed atomic.Int64 // warnings held back since then
}

// allow reports whether a warning at now (Unix nanoseconds) may be logged
// and, if so, how many were suppressed before it.
func (w *warnLimiter) allow(now int64) (bool, int64) {
	last := w.last.Load()
	if (last != 0 && now-last < int64(warnInterval)) || !w.last.CompareAndSwap(last, now) {
		w.suppressed.Add(1)
		return false, 0
	}
	return true, w.suppressed.Swap(0)
}

// warnStoreError logs the store error of v at warn level, at most once per
// warnInterval.
func (h *Handler) warnStoreError(v core.Verdict) {
	ce := h.logger.Check(zapcore.WarnLevel, "rate-limit store failed")
	if ce == nil {
		return
	}
	ok, suppressed := h.warnings.allow(time.Now().UnixNano())
	if !ok {
		return
	}
	ce.Write(
		zap.Error(v.Err),
		zap.String("outcome", v.Outcome.String()),
		zap.Bool("fallback", v.Fallback),
		zap.Int64("suppressed", suppressed),
	)
}

// logRejection logs that a zone rejected a request, at debug level, or
// would have, in dry_run mode, at info level and at most once per
// warnInterval (with the count of those held back since the last line), so
// that a dry run shows at the default level what enforcing would refuse.
// It gives the zone, the outcome, the Retry-After and, only with log_key,
// the zone's key.
func (h *Handler) logRejection(zone int, v core.Verdict, asks []model.Ask) {
	var suppressed int64
	var ce *zapcore.CheckedEntry
	if v.Outcome == core.OutcomeDryRunRejected {
		if ce = h.logger.Check(zapcore.InfoLevel, "request would have been rate-limited (dry run)"); ce == nil {
			return
		}
		var ok bool
		if ok, suppressed = h.dryRuns.allow(time.Now().UnixNano()); !ok {
			return
		}
	} else if ce = h.logger.Check(zapcore.DebugLevel, "request rate-limited"); ce == nil {
		return
	}
	z := h.Zones[zone]
	fields := []zap.Field{
		zap.String("zone", z.Name),
		zap.String("outcome", v.Outcome.String()),
	}
	if ra := v.Decision.RetryAfter; ra == model.Never {
		fields = append(fields, zap.String("retry_after", "never"))
	} else {
		fields = append(fields, zap.Duration("retry_after", ra))
	}
	if h.LogKey {
		for _, a := range asks {
			if a.Limit.Name == z.Name {
				fields = append(fields, zap.String("key", strings.TrimPrefix(a.Key, z.prefix)))
			}
		}
	}
	if v.Outcome == core.OutcomeDryRunRejected {
		fields = append(fields, zap.Int64("suppressed", suppressed))
	}
	ce.Write(fields...)
}

// redisLoggerName names the logger of go-redis's own lines in Caddy's log.
const redisLoggerName = "http.handlers.sluice.redis"

// redisLogger writes the lines go-redis logs itself (a Sentinel that
// cannot be reached, a new master), which it would otherwise print as
// plain text to stderr amid Caddy's structured log, to Caddy's default
// log as logger http.handlers.sluice.redis: at info level those that
// report no failure or error, at warn level the others, at most one per
// warnInterval (go-redis logs every failed dial: in an outage, about one
// per request), with the count of those held back. Each line goes to the
// default log of the config running when it is written.
type redisLogger struct{}

// redisWarnings limits go-redis's warnings, which are the process's.
var redisWarnings warnLimiter

// Printf implements go-redis's internal.Logging.
func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l := caddy.Log().Named(redisLoggerName)
	if lower := strings.ToLower(msg); !strings.Contains(lower, "fail") && !strings.Contains(lower, "error") {
		l.Info(msg)
		return
	}
	if ok, suppressed := redisWarnings.allow(time.Now().UnixNano()); ok {
		l.Warn(msg, zap.Int64("suppressed", suppressed))
	}
}

// routeRedisLog makes go-redis log through redisLogger. go-redis has one
// logger for the whole process (redis.SetLogger), so it is set once, when
// the first Redis store is built, and then carries the lines of every
// go-redis client in the process.
var routeRedisLog = sync.OnceFunc(func() { redis.SetLogger(redisLogger{}) })
