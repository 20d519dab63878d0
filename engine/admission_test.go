package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// admitAsync waits for n tokens as call says, in the background; the
// returned channel receives its refusal (nil when admitted).
func admitAsync(a *admission, call Call, n int) <-chan *schema.Error {
	out := make(chan *schema.Error, 1)
	go func() {
		_, se := a.acquire(context.Background(), call, n)
		out <- se
	}()
	return out
}

// TestAdmissionWeightedTurns: calls that wait are admitted tenant by
// tenant, by deficit round robin over tokens: a tenant of weight 3 is
// admitted three times the tokens of one of weight 1 in a round, and each
// tenant's calls in arrival order. AnyTenant weighs the tenants not named.
func TestAdmissionWeightedTurns(t *testing.T) {
	for _, weights := range []map[string]int{{"heavy": 3}, {AnyTenant: 3, "light": 1}} {
		t.Run(fmt.Sprint(weights), func(t *testing.T) { weightedTurns(t, weights) })
	}
}

func weightedTurns(t *testing.T, weights map[string]int) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmission(Config{AdmissionTokens: 100, InteractiveTokens: 10, MaxTokens: 2, QueueTokens: 100, TenantWeights: weights})
		if _, se := a.acquire(context.Background(), Call{Class: Interactive, Tenant: "x"}, 10); se != nil {
			t.Fatal(se)
		}
		var mu sync.Mutex
		admitted := map[string]int{}
		var all []<-chan *schema.Error
		for i := range 12 {
			tenant := "light"
			if i%2 == 0 {
				tenant = "heavy"
			}
			ch := make(chan *schema.Error, 1)
			all = append(all, ch)
			go func() {
				_, se := a.acquire(context.Background(), Call{Class: Interactive, Tenant: tenant}, 2)
				if se == nil {
					mu.Lock()
					admitted[tenant]++
					mu.Unlock()
				}
				ch <- se
			}()
			synctest.Wait()
		}
		a.release(Interactive, 8) // room for one round: 4 calls of 2 tokens
		synctest.Wait()
		mu.Lock()
		heavy, light := admitted["heavy"], admitted["light"]
		mu.Unlock()
		if heavy != 3 || light != 1 {
			t.Errorf("admitted heavy %d, light %d calls of 2 tokens into 8; want 3 and 1 (weight 3 against 1)", heavy, light)
		}
		a.release(Interactive, 10)
		synctest.Wait()
		a.release(Interactive, 6)
		for _, ch := range all {
			if se := <-ch; se != nil {
				t.Errorf("refused: %v", se)
			}
		}
	})
}

// TestAdmissionFloodAndDeadline: one tenant's flood fills the interactive
// queue; another tenant's call still gets in (it pushes out the flood's
// newest call, answered overloaded), a tenant at its share is refused at
// once, and a call that gets no room before its deadline fails
// deadline_exceeded then, past MaxWait overloaded.
func TestAdmissionFloodAndDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmission(Config{AdmissionTokens: 100, InteractiveTokens: 10, MaxTokens: 2, QueueTokens: 10})
		if _, se := a.acquire(context.Background(), Call{Class: Interactive, Tenant: "x"}, 10); se != nil {
			t.Fatal(se)
		}
		var flood []<-chan *schema.Error
		for range 5 {
			flood = append(flood, admitAsync(a, Call{Class: Interactive, Tenant: "flood"}, 2))
			synctest.Wait()
		}
		if _, se := a.acquire(context.Background(), Call{Class: Interactive, Tenant: "flood"}, 2); se == nil || se.Code != schema.CodeOverloaded {
			t.Errorf("the flood's call over a full queue: %v, want overloaded at once", se)
		}
		other := admitAsync(a, Call{Class: Interactive, Tenant: "other"}, 2)
		synctest.Wait()
		if se := <-flood[4]; se == nil || se.Code != schema.CodeOverloaded {
			t.Errorf("the flood's newest call: %v, want pushed out overloaded", se)
		}
		if _, se := a.acquire(context.Background(), Call{}, 100); se != nil {
			t.Fatal(se)
		}
		start := time.Now()
		late := admitAsync(a, Call{Class: Bulk, Deadline: start.Add(2 * time.Second)}, 200)
		_, se := a.acquire(context.Background(), Call{Class: Bulk, MaxWait: time.Second}, 200)
		if se == nil || se.Code != schema.CodeOverloaded || time.Since(start) != time.Second {
			t.Errorf("a call past its MaxWait: %v after %s, want overloaded after 1s", se, time.Since(start))
		}
		if se := <-late; se == nil || se.Code != schema.CodeDeadlineExceeded || time.Since(start) != 2*time.Second {
			t.Errorf("a call past its deadline: %v after %s, want deadline_exceeded after 2s", se, time.Since(start))
		}
		a.release(Interactive, 10)
		if se := <-other; se != nil {
			t.Errorf("the other tenant's call: %v, want admitted", se)
		}
		for _, ch := range flood[:4] {
			if se := <-ch; se != nil {
				t.Errorf("the flood's queued call: %v, want admitted", se)
			}
		}
	})
}

// TestAdmissionRejoinDoesNotStarve: a tenant that keeps one call waiting
// at a time (its queue empties each time it is admitted, and its next call
// arrives before the next release) does not take every release ahead of a
// tenant with a backlog: the turns alternate, as for any two tenants of
// equal weight that both wait.
func TestAdmissionRejoinDoesNotStarve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmission(Config{AdmissionTokens: 10, InteractiveTokens: 10, MaxTokens: 10})
		if _, se := a.acquire(context.Background(), Call{Tenant: "x"}, 10); se != nil {
			t.Fatal(se)
		}
		var backlog []<-chan *schema.Error
		for range 3 {
			backlog = append(backlog, admitAsync(a, Call{Tenant: "backlog"}, 10))
			synctest.Wait()
		}
		admittedBacklog := func() int {
			n := 0
			for _, ch := range backlog {
				select {
				case se := <-ch:
					if se != nil {
						t.Fatalf("backlog call refused: %v", se)
					}
					n++
				default:
				}
			}
			return n
		}
		got := 0
		for range 4 {
			admitAsync(a, Call{Tenant: "trickle"}, 10) // one call waiting at a time
			synctest.Wait()
			a.release(Bulk, 10) // room for one call
			synctest.Wait()
			got += admittedBacklog()
		}
		if got < 2 {
			t.Errorf("the backlogged tenant got %d of 4 releases, want 2 (equal weights): the trickling tenant took the rest", got)
		}
		for range 3 { // the three calls still waiting, so the bubble ends
			a.release(Bulk, 10)
			synctest.Wait()
		}
	})
}

// TestAdmissionPushOutOfTheTurnGrants: a push-out that takes the call
// whose turn it was (it did not fit) out of the queue lets in at once the
// calls that fit behind it, the pushing call too. Before, they waited for
// the next release of the budget, with room for them.
func TestAdmissionPushOutOfTheTurnGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmission(Config{AdmissionTokens: 100, InteractiveTokens: 10, MaxTokens: 8, QueueTokens: 10})
		if _, se := a.acquire(context.Background(), Call{Class: Interactive, Tenant: "x"}, 6); se != nil {
			t.Fatal(se)
		}
		hog := admitAsync(a, Call{Class: Interactive, Tenant: "hog"}, 8) // does not fit: 6 + 8 > 10
		synctest.Wait()
		// 8 + 4 tokens waiting pass the queue's 10: the hog's call, over
		// its share (5), is pushed out; 6 + 4 fit the budget.
		other := admitAsync(a, Call{Class: Interactive, Tenant: "other"}, 4)
		synctest.Wait()
		select {
		case se := <-hog:
			if se == nil || se.Code != schema.CodeOverloaded {
				t.Errorf("the hog's call: %v, want pushed out (overloaded)", se)
			}
		default:
			t.Error("the hog's call still waits, want pushed out")
		}
		select {
		case se := <-other:
			if se != nil {
				t.Errorf("the pushing call: %v, want admitted", se)
			}
		default:
			t.Error("the pushing call waits with room for it in the budget (6 + 4 of 10 tokens)")
		}
		a.release(Interactive, 6)
		synctest.Wait()
	})
}

// TestAdmissionNoPushOutForNothing: a call that would push another
// tenant's call out of the full interactive queue but is refused anyway
// (at the measured drain rate it could not start before its deadline)
// pushes nothing out: the flood's newest call keeps waiting and is
// admitted later, instead of being answered overloaded for a call that
// never ran.
func TestAdmissionNoPushOutForNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmission(Config{AdmissionTokens: 100, InteractiveTokens: 10, MaxTokens: 2, QueueTokens: 10})
		// Measure a drain rate: 10 tokens in a second.
		if _, se := a.acquire(context.Background(), Call{Class: Interactive, Tenant: "x"}, 10); se != nil {
			t.Fatal(se)
		}
		time.Sleep(time.Second)
		a.release(Interactive, 10)
		if _, se := a.acquire(context.Background(), Call{Class: Interactive, Tenant: "x"}, 10); se != nil {
			t.Fatal(se)
		}
		var flood []<-chan *schema.Error
		for range 5 {
			flood = append(flood, admitAsync(a, Call{Class: Interactive, Tenant: "flood"}, 2))
			synctest.Wait()
		}
		_, se := a.acquire(context.Background(), Call{Class: Interactive, Tenant: "other", Deadline: time.Now().Add(10 * time.Millisecond)}, 2)
		if se == nil || se.Code != schema.CodeOverloaded {
			t.Fatalf("a call that could not start before its deadline: %v, want overloaded", se)
		}
		synctest.Wait()
		select {
		case se := <-flood[4]:
			t.Errorf("the flood's newest call answered %v for a call that was refused anyway, want it still waiting", se)
		default:
		}
		a.release(Interactive, 10)
		synctest.Wait()
		for _, ch := range flood {
			select {
			case se := <-ch:
				if se != nil {
					t.Errorf("the flood's call: %v, want admitted", se)
				}
			default:
			}
		}
	})
}
