package main

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
)

// proxy is a toxiproxy proxy between one host (or every host, for a
// Cluster node) and Redis, run in this process.
type proxy struct {
	name string
	addr string // where the host connects: 127.0.0.1:port
	p    *toxiproxy.Proxy
}

// proxyServer holds the proxies; toxiproxy's API server is not started.
var proxyServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())

// newProxy starts a proxy to upstream on a free loopback port.
func newProxy(name, upstream string) (*proxy, error) {
	p := toxiproxy.NewProxy(proxyServer, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("proxy %s: %v", name, err)
	}
	return &proxy{name: name, addr: p.Listen, p: p}, nil
}

// add adds a toxic, written as toxiproxy's API takes it.
func (p *proxy) add(name, typ, stream string, attrs string) error {
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	_, err := p.p.Toxics.AddToxicJson(strings.NewReader(body))
	return err
}

// remove removes the toxic name, if present.
func (p *proxy) remove(name string) {
	if p.p.Toxics.GetToxic(name) != nil {
		p.p.Toxics.RemoveToxic(context.Background(), name)
	}
}

// DropReplyToxic drops a reply after the command it answers was written:
// each chunk of the downstream stream (Redis to the host) is, with
// probability Probability, discarded, and the connection closed, so that
// the host sees its connection end after Redis ran the command. It is
// toxiproxy's own limit_data and reset_peer drawn per reply rather than
// per connection.
type DropReplyToxic struct {
	Probability float64 `json:"probability"`
	Seed        int64   `json:"seed"`

	once sync.Once
	mu   sync.Mutex
	rnd  *rand.Rand
}

// Pipe passes the chunks of stub, dropping some with the connection.
func (t *DropReplyToxic) Pipe(stub *toxics.ToxicStub) {
	t.once.Do(func() { t.rnd = rand.New(rand.NewSource(t.Seed)) })
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			t.mu.Lock()
			drop := t.rnd.Float64() < t.Probability
			t.mu.Unlock()
			if drop {
				stub.Close()
				return
			}
			stub.Output <- c
		}
	}
}

func init() {
	toxics.Register("drop_reply", new(DropReplyToxic))
}
