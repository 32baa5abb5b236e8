package yaegibench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mitchellh/mapstructure"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/traefik/yaegi/interp"
	"github.com/traefik/yaegi/stdlib"
)

// module is sluice's module path; pluginImport is what .traefik.yml imports.
const (
	module       = "github.com/sluicehq/sluice"
	pluginImport = module + "/traefikplugin"
)

// trivialImport is a plugin that sets one response header
// (bench/testdata/trivial): the least a Traefik plugin costs, measured
// beside sluice in every run.
const trivialImport = "example.com/trivial"

// floorImport is a bare token bucket that writes sluice's five headers on
// an admission and has none of its guarantees (bench/testdata/floor):
// about the least such a limiter costs under the interpreter, measured
// beside sluice.
const floorImport = "example.com/floor"

// redisFloorImport is a bare token bucket decided by one EVALSHA over a
// pooled connection, writing sluice's five headers on an admission, with
// none of sluice's guarantees (bench/testdata/redisfloor): about the least
// a Redis limiter costs under the interpreter, measured beside sluice's
// Redis path.
const redisFloorImport = "example.com/redisfloor"

// ballast stands for the live heap of the Traefik process around the
// plugin (some 100 MB of RSS in the runs of bench/traefik): the garbage
// collector runs when the heap has grown by GOGC percent of what is live,
// so without it a plugin that holds little memory would be charged for far
// more collections than in Traefik, and one that holds more for fewer.
var ballast = make([]byte, 64<<20)

// plugin is one package imported into its own interpreter, with the two
// functions Traefik calls.
type plugin struct {
	createConfig, newFn reflect.Value
}

// gopath lays out, in a temporary GOPATH, sluice's go.mod and the Go files
// (tests left out) of every package the plugin needs, and the trivial,
// floor and Redis floor plugins, as Traefik finds them under
// plugins-local/src.
func gopath(tb testing.TB) string {
	tb.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	src := filepath.Join(dir, "src", module)
	copyFile(tb, filepath.Join(root, "go.mod"), filepath.Join(src, "go.mod"))
	for _, pkg := range pluginPackages(tb, root) {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil {
			tb.Fatal(err)
		}
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				copyFile(tb, f, filepath.Join(src, pkg, filepath.Base(f)))
			}
		}
	}
	copyFile(tb, filepath.Join(root, "bench", "testdata", "trivial", "trivial.go"), filepath.Join(dir, "src", trivialImport, "trivial.go"))
	copyFile(tb, filepath.Join(root, "bench", "testdata", "floor", "floor.go"), filepath.Join(dir, "src", floorImport, "floor.go"))
	copyFile(tb, filepath.Join(root, "bench", "testdata", "redisfloor", "redisfloor.go"), filepath.Join(dir, "src", redisFloorImport, "redisfloor.go"))
	return dir
}

// pluginPackages lists the directories, relative to root, of the packages
// of this module that the plugin imports, itself included, as go list
// finds them.
func pluginPackages(tb testing.TB, root string) []string {
	tb.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./traefikplugin")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("go list the plugin's packages: %v", err)
	}
	var dirs []string
	for _, imp := range strings.Fields(string(out)) {
		dirs = append(dirs, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
	}
	return dirs
}

// TestPluginLoadsOnlyItsOwn: the plugin imports, besides the standard
// library, only traefikplugin and core's packages, and none of what only
// Caddy uses (core/inspect), which Yaegi would otherwise load, compile and
// keep in every Traefik.
func TestPluginLoadsOnlyItsOwn(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range pluginPackages(t, root) {
		if dir != "traefikplugin" && dir != "core" && !strings.HasPrefix(dir, "core/") || dir == "core/inspect" {
			t.Errorf("the plugin imports %s", dir)
		}
	}
}

func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// load imports the package imp from the GOPATH dir into a new interpreter,
// as Traefik's plugin loader does (pkg/plugins: newInterpreter and
// newYaegiMiddlewareBuilder): the standard library's symbols, the import,
// then New and CreateConfig by name.
func load(tb testing.TB, dir, imp string) *plugin {
	tb.Helper()
	i := interp.New(interp.Options{GoPath: dir, Env: os.Environ(), Stdout: io.Discard, Stderr: io.Discard})
	if err := i.Use(stdlib.Symbols); err != nil {
		tb.Fatal(err)
	}
	if _, err := i.Eval(fmt.Sprintf("import %q", imp)); err != nil {
		tb.Fatalf("importing %s: %v", imp, err)
	}
	base := filepath.Base(imp)
	p := &plugin{}
	var err error
	if p.newFn, err = i.Eval(base + ".New"); err != nil {
		tb.Fatal(err)
	}
	if p.createConfig, err = i.Eval(base + ".CreateConfig"); err != nil {
		tb.Fatal(err)
	}
	return p
}

// handler decodes config into a new CreateConfig() as Traefik does
// (mapstructure, weakly typed, comma-separated strings as lists) and
// returns New's handler in front of next.
func (p *plugin) handler(tb testing.TB, config map[string]any, name string, next http.Handler) http.Handler {
	tb.Helper()
	h, err := p.newHandler(tb, config, name, next)
	if err != nil {
		tb.Fatalf("New(%v): %v", config, err)
	}
	return h
}

// newHandler is handler, returning New's error.
func (p *plugin) newHandler(tb testing.TB, config map[string]any, name string, next http.Handler) (http.Handler, error) {
	tb.Helper()
	cfg := p.createConfig.Call(nil)[0]
	if len(config) > 0 {
		dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
			DecodeHook:       mapstructure.StringToSliceHookFunc(","),
			WeaklyTypedInput: true,
			Result:           cfg.Interface(),
		})
		if err != nil {
			tb.Fatal(err)
		}
		if err := dec.Decode(config); err != nil {
			tb.Fatalf("decoding %v: %v", config, err)
		}
	}
	out := p.newFn.Call([]reflect.Value{reflect.ValueOf(context.Background()), reflect.ValueOf(next), cfg, reflect.ValueOf(name)})
	if err, _ := out[1].Interface().(error); err != nil {
		return nil, err
	}
	h, ok := out[0].Interface().(http.Handler)
	if !ok {
		tb.Fatalf("New returned %T, not an http.Handler", out[0].Interface())
	}
	return h, nil
}

// writer is a compiled ResponseWriter, as Traefik's are: it keeps the
// header map and the status, and discards the body.
type writer struct {
	h      http.Header
	status int
}

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(p []byte) (int, error) { return len(p), nil }
func (w *writer) WriteHeader(code int)        { w.status = code }

// next is the compiled handler behind the middleware; it counts the
// requests that reach it and answers with header.
type next struct {
	n      atomic.Int64
	header http.Header // written to every response
}

func (n *next) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n.n.Add(1)
	for k, v := range n.header {
		w.Header()[k] = v
	}
}

// cost is one case's measurement.
type cost struct {
	ns     float64 // per request, median of the rounds
	allocs float64 // per request, fewest of the rounds
	status int     // of the last response (0: the handler wrote none, 200)
	passed bool    // the last request reached next
}

// measure sends req to h (in front of nx) rounds×n times, a fresh (cleared) header map for
// each response, and returns the median time and the fewest allocations
// per request over the rounds. warm requests run first, unmeasured.
func measure(h http.Handler, nx *next, req *http.Request, warm, rounds, n int) cost {
	w := &writer{h: http.Header{}}
	serve := func() {
		for k := range w.h {
			delete(w.h, k)
		}
		w.status = 0
		h.ServeHTTP(w, req)
	}
	for i := 0; i < warm; i++ {
		serve()
	}
	ns, allocs := sample(rounds, n, func() {
		for i := 0; i < n; i++ {
			serve()
		}
	})
	c := cost{ns: ns, allocs: allocs, status: w.status}
	seen := nx.n.Load()
	serve()
	c.passed = nx.n.Load() > seen
	return c
}

// measureParallel is measure for callers goroutines that serve req at
// once, each n times with its own writer, in each of rounds: the
// allocations per request, fewest of the rounds, the time per request,
// median of the rounds (of the wall clock: the callers overlap), and
// whether every request reached nx. A plugin on Redis whose callers
// outnumber its connections queues its commands (resp's natural
// batching), which the sequential measure never reaches.
func measureParallel(h http.Handler, nx *next, req *http.Request, callers, rounds, n int) cost {
	serve := func() {
		var wg sync.WaitGroup
		for g := 0; g < callers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := &writer{h: http.Header{}}
				for i := 0; i < n; i++ {
					for k := range w.h {
						delete(w.h, k)
					}
					h.ServeHTTP(w, req)
				}
			}()
		}
		wg.Wait()
	}
	seen := nx.n.Load()
	serve() // warm: every connection of the pool opened
	ns, allocs := sample(rounds, callers*n, serve)
	return cost{ns: ns, allocs: allocs, passed: nx.n.Load()-seen == int64((rounds+1)*callers*n)}
}

// sample runs round rounds times, each serving per requests, and returns
// the time per request, median of the rounds, and the allocations per
// request, fewest of the rounds.
func sample(rounds, per int, round func()) (ns, allocs float64) {
	var times, counts []float64
	var before, after runtime.MemStats
	for r := 0; r < rounds; r++ {
		runtime.GC()
		runtime.ReadMemStats(&before)
		t0 := time.Now()
		round()
		el := time.Since(t0)
		runtime.ReadMemStats(&after)
		times = append(times, float64(el.Nanoseconds())/float64(per))
		counts = append(counts, float64(after.Mallocs-before.Mallocs)/float64(per))
	}
	runtime.KeepAlive(ballast)
	sort.Float64s(times)
	sort.Float64s(counts)
	return times[len(times)/2], counts[0]
}

// TestUnknownOption: through Traefik's own decoder (mapstructure) and the
// interpreter, an option the plugin does not know reaches its Unknown
// fields and New refuses it, naming it, at the top level and in a block.
func TestUnknownOption(t *testing.T) {
	sluice, _, _, _ := loadPlugins(t)
	for _, tc := range []struct {
		config map[string]any
		want   string
	}{
		{map[string]any{"average": 10, "averge": 10}, "sluice unknown@file: averge: unknown option"},
		{map[string]any{"average": 10, "redis": map[string]any{"endpoint": "127.0.0.1:6379"}}, "sluice unknown@file: redis.endpoint: unknown option"},
		{map[string]any{"limits": []any{map[string]any{"name": "a", "average": 1, "rate": "1/s"}}}, "sluice unknown@file: limits[0].rate: unknown option"},
	} {
		_, err := sluice.newHandler(t, tc.config, "unknown@file", &next{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: New error %v, want one containing %q", tc.config, err, tc.want)
		}
	}
}

// TestFloorAnswersAsSluice: the floor plugin writes on an admission the
// headers sluice writes, with the same values (X-RateLimit-Reset within a
// second: the two read the clock apart), so that the cost report compares
// like with like.
func TestFloorAnswersAsSluice(t *testing.T) {
	sluice, _, floor, _ := loadPlugins(t)
	for i, config := range floorConfigs {
		name := "floor" + strconv.Itoa(i) + "@file"
		answerAlike(t, config, sluice.handler(t, config, name, &next{}), floor.handler(t, config, name, &next{}))
	}
}

// TestRedisFloorAnswersAsSluice: the Redis floor plugin writes on an
// admission the headers sluice on Redis writes, as
// TestFloorAnswersAsSluice checks for the floor.
func TestRedisFloorAnswersAsSluice(t *testing.T) {
	sluice, _, _, redisFloor := loadPlugins(t)
	srv := redistest.Start(t, redistest.Options{})
	for i, config := range floorConfigs {
		name := "redisfloor" + strconv.Itoa(i) + "@file"
		hs := sluice.handler(t, onRedis(pluginCase{config: config}, srv.Addr).config, name, &next{})
		hf := redisFloor.handler(t, onRedis(pluginCase{config: config, redisFloor: true}, srv.Addr).config, name, &next{})
		answerAlike(t, config, hs, hf)
	}
}

// floorConfigs are the limits on which the floors must answer as sluice.
var floorConfigs = []map[string]any{open, {"average": 100, "burst": 50}, {"average": 3, "burst": 2}}

// answerAlike sends two requests of one client to sluice's handler hs and
// a floor's hf, both configured with config, and checks that both admit
// them with the same headers (X-RateLimit-Reset within a second: the two
// read the clock apart). Each handler gets its two requests back to back,
// so that what a bucket refills between them (a token per 10 ms at 100/s)
// is the same for both unless the machine stalls one for that long.
func answerAlike(t *testing.T, config map[string]any, hs, hf http.Handler) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
	req.RemoteAddr = ipv4
	var wss, wfs [2]*writer
	for n := range wss {
		wss[n] = &writer{h: http.Header{}}
		hs.ServeHTTP(wss[n], req)
	}
	for n := range wfs {
		wfs[n] = &writer{h: http.Header{}}
		hf.ServeHTTP(wfs[n], req)
	}
	for n := 0; n < 2; n++ {
		ws, wf := wss[n], wfs[n]
		if ws.status != 0 || wf.status != 0 {
			t.Fatalf("%v, request %d: status %d (sluice), %d (floor); want both admitted", config, n, ws.status, wf.status)
		}
		rs, _ := strconv.ParseInt(ws.h.Get("X-Ratelimit-Reset"), 10, 64)
		rf, _ := strconv.ParseInt(wf.h.Get("X-Ratelimit-Reset"), 10, 64)
		if rs == 0 || rf < rs-1 || rf > rs+1 {
			t.Errorf("%v, request %d: X-RateLimit-Reset %d (sluice), %d (floor)", config, n, rs, rf)
		}
		ws.h.Del("X-Ratelimit-Reset")
		wf.h.Del("X-Ratelimit-Reset")
		if !reflect.DeepEqual(ws.h, wf.h) {
			t.Errorf("%v, request %d: headers\n%v (sluice)\n%v (floor)", config, n, ws.h, wf.h)
		}
	}
}
