package fleet

import (
	"testing"
	"time"
)

// The accounting counts lost, duplicate and stray results from the results
// stream, and explains every redelivery by the fate of the member that had
// the job before.
func TestAccount(t *testing.T) {
	at := time.Unix(100, 0)
	acked := func(m int) delivery { return delivery{member: m, received: at, acked: at.Add(time.Millisecond)} }
	open := func(m int) delivery { return delivery{member: m, received: at} }
	rid := func(id string) string { return "r-" + id }
	sent := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	stored := map[string]int{"r-a": 1, "r-b": 1, "r-c": 2, "r-d": 1, "r-e": 1, "r-f": 1, "r-h": 1, "r-zz": 1} // g lost, c twice, zz stray
	fates := map[int]fate{1: live, 2: killed, 3: stopped}
	jobs := map[string][]delivery{
		"a": {acked(1)},
		"b": {open(2), acked(1)},                            // killed member had it
		"c": {acked(2), acked(1)},                           // killed after its ack left: done twice
		"d": {open(3), acked(1)},                            // NAKed back by a graceful stop
		"e": {open(1), acked(1)},                            // a live member let it expire
		"f": {open(3), open(2), acked(1)},                   // stopped, then killed
		"g": {open(2)},                                      // never settled
		"h": {{member: 1, num: 2, received: at, acked: at}}, // its first delivery sat in a buffer
	}
	got := account(sent, stored, rid, jobs, fates)
	want := tally{
		Sent: 8, Stored: 7, Lost: 1, StoredDuplicates: 1, Strays: 1,
		Redelivered: 6, FromKilled: 3, FromStopped: 1, FromLive: 1, FromBuffer: 1, DoubleAcked: 1,
	}
	if got != want {
		t.Errorf("account:\n got %+v\nwant %+v", got, want)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := percentile(ds, tt.p); got != tt.want {
			t.Errorf("percentile(%g) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %v", got)
	}
}
