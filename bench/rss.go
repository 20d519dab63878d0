package bench

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/jetembed/jetembed/engine"
)

// rss reads one memory field of /proc/self/status (VmRSS, VmHWM) in bytes;
// 0 when it cannot be read (not Linux).
func rss(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, rest, ok := strings.Cut(s.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// resetPeakRSS resets VmHWM to the current RSS (Linux 4.0 and later), so
// that the next read is the peak of what runs in between.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// counting wraps an embedder and sums the tokens it ran, so that a pipeline
// run reports its padding like a bare run does.
type counting struct {
	inner interface {
		Embed(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.Report, error)
	}
	mu             sync.Mutex
	tokens, padded int
}

func (c *counting) Embed(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.Report, error) {
	embs, rep, err := c.inner.Embed(ctx, texts)
	c.mu.Lock()
	c.tokens += rep.Tokens
	c.padded += rep.PaddedTokens
	c.mu.Unlock()
	return embs, rep, err
}

// ModelID and MaxTokens pass through what the consumer asks the engine.
func (c *counting) ModelID() string {
	if m, ok := c.inner.(interface{ ModelID() string }); ok {
		return m.ModelID()
	}
	return ""
}

func (c *counting) MaxTokens() int {
	if m, ok := c.inner.(interface{ MaxTokens() int }); ok {
		return m.MaxTokens()
	}
	return 0
}

func (c *counting) totals() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokens, c.padded
}
