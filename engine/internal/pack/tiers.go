package pack

// Tiers returns ascending sequence tiers from lo to hi: every power of two
// in between, each octave split into steps equal parts, every tier a
// multiple of 8 (the alignment kernels prefer). steps 1 gives the powers of
// two; 4 keeps the padding of a lone text under 20% above 32 tokens, which
// is what lets packing stay above 90% efficient on real length mixes.
func Tiers(lo, hi, steps int) []int {
	lo = max(lo, 8)
	steps = max(steps, 1)
	var out []int
	add := func(t int) {
		t = (t + 7) &^ 7
		if t > hi {
			t = hi
		}
		if t >= lo && (len(out) == 0 || t > out[len(out)-1]) {
			out = append(out, t)
		}
	}
	for oct := 8; oct < hi; oct *= 2 {
		for i := 0; i < steps; i++ {
			add(oct + oct*i/steps)
		}
	}
	add(hi)
	return out
}
