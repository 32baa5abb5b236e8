package core

import (
	"github.com/sluicehq/sluice/core/answer"
)

// answerNow is the wall clock of every answer test, in Unix nanoseconds,
// at a whole second.
const answerNow = 1700000000 * answer.NanosPerSecond
