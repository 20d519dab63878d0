package fleet

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestFleetConfigValidate(t *testing.T) {
	ok := Config{Model: "m@0123456789ab"}.WithDefaults()
	if err := ok.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if ok.SM != "cpu" || ok.Member == "" || ok.LockTTL != DefaultLockTTL {
		t.Errorf("defaults %+v", ok)
	}
	for name, edit := range map[string]func(*Config){
		"no model":      func(c *Config) { c.Model = "" },
		"lock ttl < 1s": func(c *Config) { c.LockTTL = 500 * time.Millisecond },
		"want ttl < 1s": func(c *Config) { c.WantTTL = time.Millisecond },
		"negative idle": func(c *Config) { c.IdleQuiet = -time.Second },
		"negative cap":  func(c *Config) { c.CompilesPerHour = -1 },
		"negative seq":  func(c *Config) { c.MinSeq = -1 },
		"negative tick": func(c *Config) { c.Tick = -time.Second },
	} {
		c := ok
		edit(&c)
		if err := c.validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// TestCacheFilesOfACompile checks what a shape record lists: the engine
// cache files a compile added or rewrote, relative to the cache directory.
func TestCacheFilesOfACompile(t *testing.T) {
	if cacheFiles("") != nil {
		t.Error("no cache dir: want no files")
	}
	dir := t.TempDir()
	write := func(name string, mod time.Time) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	write("a.engine", old)
	write("timing.cache", old)
	before := cacheFiles(dir)
	write("sub/b.engine", time.Now())
	write("timing.cache", time.Now())
	got := newFiles(before, cacheFiles(dir))
	if want := []string{"sub/b.engine", "timing.cache"}; !slices.Equal(got, want) {
		t.Errorf("newFiles = %v, want %v", got, want)
	}
}
