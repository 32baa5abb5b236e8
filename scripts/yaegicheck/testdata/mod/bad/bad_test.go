package bad

import (
	"sync"
	"testing"
)

func TestCaptures(t *testing.T) {
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = i
		}()
	}
	wg.Wait()
	for _, name := range []string{"a", "b"} {
		defer func() { _ = name }()
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_ = name
		})
	}
}
