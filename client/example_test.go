package client_test

import (
	"fmt"
	"log"
	"net/http"

	"github.com/sluicehq/sluice/client"
)

// A client that waits as a limited server asks, retries only what is safe
// to repeat, and paces its requests by the RateLimit header so that it
// need not see a 429 at all.
func Example() {
	c := &http.Client{Transport: &client.Transport{Pace: true}}
	resp, err := c.Get("https://api.example.com/items")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
}
