package testclock

import (
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	var zero Clock
	if got := zero.Now(); got != 0 {
		t.Errorf("zero Clock reads %d, want 0", got)
	}
	c := New(Epoch)
	if got := c.Now(); got != Epoch {
		t.Errorf("New(Epoch) reads %d, want %d", got, Epoch)
	}
	if time.Unix(0, Epoch).UTC().Format(time.RFC3339) != "2023-11-14T22:14:00Z" || Epoch%int64(time.Minute) != 0 {
		t.Errorf("Epoch %d is not 2023-11-14T22:14:00Z", Epoch)
	}
	c.Advance(1500 * time.Millisecond)
	if got, want := c.Now(), Epoch+int64(1500*time.Millisecond); got != want {
		t.Errorf("after Advance(1.5s): %d, want %d", got, want)
	}
	c.Advance(-time.Hour)
	if got, want := c.Now(), Epoch+int64(1500*time.Millisecond-time.Hour); got != want {
		t.Errorf("after Advance(-1h): %d, want %d", got, want)
	}
	c.Set(42)
	if got := c.Now(); got != 42 {
		t.Errorf("after Set(42): %d", got)
	}
}
