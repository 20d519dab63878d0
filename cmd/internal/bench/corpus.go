package bench

import (
	"math/rand/v2"
	"strings"
)

// words is the vocabulary of the synthetic corpus: common English words, so
// that the XLM-R style tokenizer splits them the way it splits real text (a
// few pieces per word), with no dependency on a downloaded data set.
var words = strings.Fields(`the of and to in is was for on that with as by at from
his her it an were are which this be or has had not but their its new first
one two after also who they been more have other when into all during time
year years may between would over only most world city state many some can
such used where three these system series part national later under both
university school while district river season family known music number
including game team government film area water since until being united
second early american war then than south north about work public several
group same each century people high life based held international language
general following following against well around history often local town
members village population including although through team league record
model vector embedding search index query document result queue stream
message delivery consumer server cluster leader replica batch token sequence
service request reply latency throughput memory budget engine session
compute network storage process thread kernel weight layer attention`)

// lengthClass is one band of the length mix: a share of the texts whose
// length in words is uniform in [lo, hi].
type lengthClass struct {
	share  float64
	lo, hi int
}

// mix is the realistic length mix of a bulk indexing run: queries and
// titles, sentences, the paragraphs that are most of a chunked corpus, and a
// tail of long chunks.
var mix = []lengthClass{
	{0.25, 3, 12},
	{0.30, 13, 40},
	{0.35, 41, 160},
	{0.10, 161, 320},
}

// Corpus returns n texts drawn from the length mix with a fixed seed: the
// same n and seed give the same texts, in the same order.
func Corpus(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 0x6a6574656d626564))
	out := make([]string, n)
	var b strings.Builder
	for i := range out {
		c := pick(r)
		w := c.lo + r.IntN(c.hi-c.lo+1)
		b.Reset()
		for k := range w {
			if k > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[r.IntN(len(words))])
		}
		b.WriteByte('.')
		out[i] = b.String()
	}
	return out
}

func pick(r *rand.Rand) lengthClass {
	x := r.Float64()
	for _, c := range mix {
		if x < c.share {
			return c
		}
		x -= c.share
	}
	return mix[len(mix)-1]
}

// Jobs cuts texts into jobs of mixed sizes, in order: two in five jobs hold
// one text (a single document), the others 2 to 32 texts (a chunked
// document). The job sizes are fixed by seed.
func Jobs(texts []string, seed uint64) [][]string {
	r := rand.New(rand.NewPCG(seed, 0x6a6f6273))
	var jobs [][]string
	for len(texts) > 0 {
		n := 1
		if r.IntN(5) >= 2 {
			n = 2 + r.IntN(31)
		}
		n = min(n, len(texts))
		jobs = append(jobs, texts[:n:n])
		texts = texts[n:]
	}
	return jobs
}
