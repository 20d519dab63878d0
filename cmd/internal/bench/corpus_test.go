package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCorpusIsDeterministicAndMixed(t *testing.T) {
	a, b := Corpus(2000, 7), Corpus(2000, 7)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different corpus")
	}
	if slices.Equal(a, Corpus(2000, 8)) {
		t.Fatal("different seeds, same corpus")
	}
	counts := make([]int, len(mix))
	for _, text := range a {
		n := len(strings.Fields(text))
		class := -1
		for i, c := range mix {
			if n >= c.lo && n <= c.hi {
				class = i
			}
		}
		if class < 0 {
			t.Fatalf("text of %d words is in no length class", n)
		}
		counts[class]++
	}
	for i, c := range mix {
		got := float64(counts[i]) / float64(len(a))
		if got < c.share-0.05 || got > c.share+0.05 {
			t.Errorf("class %d..%d words: share %.3f, want %.2f", c.lo, c.hi, got, c.share)
		}
	}
}

func TestJobsCutTextsInOrder(t *testing.T) {
	texts := Corpus(3000, 3)
	jobs := Jobs(texts, 3)
	var joined []string
	single := 0
	for _, j := range jobs {
		if len(j) < 1 || len(j) > 32 {
			t.Fatalf("job of %d texts", len(j))
		}
		if len(j) == 1 {
			single++
		}
		joined = append(joined, j...)
	}
	if !slices.Equal(joined, texts) {
		t.Fatal("the jobs do not hold the texts in order")
	}
	if share := float64(single) / float64(len(jobs)); share < 0.3 || share > 0.5 {
		t.Errorf("%.2f of the jobs hold one text, want about 0.4", share)
	}
	if !slices.EqualFunc(jobs, Jobs(texts, 3), slices.Equal[[]string]) {
		t.Error("same seed, different job sizes")
	}
}

func TestPercentile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i))
	}
	tests := []struct {
		p    float64
		want time.Duration
	}{{0.5, 51}, {0.99, 99}, {0, 1}, {1, 100}}
	for _, tt := range tests {
		if got := percentile(sorted, tt.p); got != tt.want {
			t.Errorf("percentile(%v) = %d, want %d", tt.p, got, tt.want)
		}
	}
}

func TestFixedCalls(t *testing.T) {
	if got := fixedCalls([]string{"a", "b", "c"}, 2); !slices.EqualFunc(got, [][]string{{"a", "b"}, {"c"}}, slices.Equal[[]string]) {
		t.Errorf("fixedCalls = %q", got)
	}
}
