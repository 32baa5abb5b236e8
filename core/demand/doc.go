// Package demand measures what a limit's keys ask for, so that an operator
// can choose the limit from measurements: seed 004's method of looking at
// each client's traffic (its 95th and 99th percentiles) and observing what
// a limit would refuse before enforcing it.
//
// A Recorder follows each key's demand per period of the limit (the cost
// it asks, admitted or refused) and folds every key-period that is over
// into a Sketch, a fixed-size log-bucketed histogram with a stated
// relative error (RelativeError), which merges exactly. Advise turns a
// recorder's Snapshot into an Advice: how many keys and key-periods were
// seen, the quantiles of the demand per key-period, and for the configured
// limit and a few candidates the share of key-periods, of keys and of cost
// that each would have refused at least, and that it refuses keys asking
// steadily, with bounds that hold the exact shares (to the 0.01 % they are
// rounded to).
//
// A Recorder sees the requests of the instance that holds it: behind a
// load balancer that spreads a key over several instances deciding in one
// Redis, each sees its part of that key's demand.
package demand
