package pack

import (
	"errors"
	"math"
)

// Cost models the work of a chunk of B rows of S tokens as
// A*B*S + Bq*B*S^2: the linear layers grow with the tokens, attention with
// the square of the sequence. Units are the caller's (seconds, bytes).
type Cost struct {
	A, Bq float64
}

// Of returns the modelled cost of a batch x seq chunk.
func (c Cost) Of(batch, seq int) float64 {
	bs := float64(batch) * float64(seq)
	return c.A*bs + c.Bq*bs*float64(seq)
}

// Sample is one measured chunk shape and its cost.
type Sample struct {
	Batch, Seq int
	Cost       float64
}

// ErrFit reports samples a [Cost] cannot be fitted to.
var ErrFit = errors.New("pack: cannot fit cost model")

// Fit returns the least-squares Cost for the samples (no intercept: an
// empty chunk costs nothing). It needs two shapes with different sequence
// lengths. A negative coefficient, which measurement noise can produce, is
// clamped to zero and the other refitted alone.
func Fit(samples []Sample) (Cost, error) {
	// Normal equations of cost = A*x + B*y with x = B*S, y = B*S^2.
	var sxx, sxy, syy, sxc, syc float64
	for _, s := range samples {
		x := float64(s.Batch) * float64(s.Seq)
		y := x * float64(s.Seq)
		sxx += x * x
		sxy += x * y
		syy += y * y
		sxc += x * s.Cost
		syc += y * s.Cost
	}
	det := sxx*syy - sxy*sxy
	if len(samples) < 2 || det <= 1e-9*sxx*syy || math.IsNaN(det) {
		return Cost{}, ErrFit
	}
	c := Cost{A: (sxc*syy - syc*sxy) / det, Bq: (syc*sxx - sxc*sxy) / det}
	switch {
	case c.A < 0:
		c = Cost{Bq: max(syc/syy, 0)}
	case c.Bq < 0:
		c = Cost{A: max(sxc/sxx, 0)}
	}
	return c, nil
}
