package good

import (
	"sync"
	"testing"
)

func TestUse(t *testing.T) {
	tests := []struct{ name string }{{"a"}, {"b"}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if n, _ := Use(); n != 3 {
				t.Fatalf("%s: Use() = %d, want 3", tc.name, n)
			}
		})
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		i := i
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = i
		}()
	}
	wg.Wait()
}
