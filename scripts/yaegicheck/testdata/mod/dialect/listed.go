package dialect

import (
	"strconv"
	"time"
)

var now = time.Now

// Quote fills b, a scratch parameter allowed in this listed file.
func Quote(s string, b []byte) string {
	b = strconv.AppendQuote(nil, s)
	return string(b)
}
