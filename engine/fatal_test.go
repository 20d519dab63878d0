package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// ortError is an error whose text does not include its cause's, as some
// wrappers of a C API's status do.
type ortError struct{ cause error }

func (e ortError) Error() string { return "onnxruntime: Run failed" }
func (e ortError) Unwrap() error { return e.cause }

var errTRTBuild = errors.New("[TensorRT EP] failed to build engine: engine_0 (out of memory)")

func TestIsFatal(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"other", errBoom, false},
		{"build", errTRTBuild, true},
		{"network", errors.New("TensorRT EP Failed to create engine from network for fused node"), true},
		{"wrapped", fmt.Errorf("session 0: run 1x64: %w", errTRTBuild), true},
		{"hidden cause", ortError{cause: errTRTBuild}, true},
		{"joined", errors.Join(errBoom, ortError{cause: errTRTBuild}), true},
		{"sentinel", fmt.Errorf("x: %w", ErrFatal), true},
		{"deadline", context.DeadlineExceeded, false},
	} {
		if got := IsFatal(tc.err); got != tc.want {
			t.Errorf("%s: IsFatal(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// seqRunner fails runs of seq with err.
type seqRunner struct {
	fakeRunner
	seq int
	err error
}

func (r *seqRunner) Run(ctx context.Context, in RunInput) (RunOutput, error) {
	if in.Seq == r.seq {
		return RunOutput{}, r.err
	}
	return r.fakeRunner.Run(ctx, in)
}

func seqFactory(seq int, err error) RunnerFactory {
	return func(int) (Runner, error) { return &seqRunner{seq: seq, err: err}, nil }
}

// TestFatalRunError: a run that fails with TensorRT's fatal build error
// marks the engine fatal (Fatal closes, Health fails with ErrFatal), and
// the chunk's texts fail; other errors do not.
func TestFatalRunError(t *testing.T) {
	e, err := New(context.Background(), testConfig(), fakeTok{}, fakeModel(64), seqFactory(64, ortError{cause: errTRTBuild}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	short := []Text{{Text: words(3, 1), Outputs: Dense, Truncate: true}}
	if embs, _, err := e.Embed(context.Background(), short, Call{}); err != nil || embs[0].Err != nil {
		t.Fatalf("short text: %v %v", err, embs[0].Err)
	}
	if e.FatalErr() != nil || e.Health(context.Background()) != nil {
		t.Fatal("fatal before any fatal run")
	}
	long := []Text{{Text: words(50, 2), Outputs: Dense, Truncate: true}}
	if _, _, err := e.Embed(context.Background(), long, Call{}); !errors.Is(err, ErrFatal) {
		t.Fatalf("long text: %v; want the call to fail with ErrFatal", err)
	}
	// Every later call too: the process must give its work back.
	if _, _, err := e.Embed(context.Background(), short, Call{}); !errors.Is(err, ErrFatal) {
		t.Errorf("short text after the fatal error: %v; want ErrFatal", err)
	}
	select {
	case <-e.Fatal():
	default:
		t.Fatal("Fatal not closed after a fatal build error")
	}
	if err := e.FatalErr(); !errors.Is(err, errTRTBuild) {
		t.Errorf("FatalErr = %v", err)
	}
	if err := e.Health(context.Background()); !errors.Is(err, ErrFatal) {
		t.Errorf("Health = %v, want ErrFatal", err)
	}

	// A plain run error is not fatal.
	e2, err := New(context.Background(), testConfig(), fakeTok{}, fakeModel(64), seqFactory(64, errBoom))
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if embs, _, _ := e2.Embed(context.Background(), long, Call{}); embs[0].Err == nil || e2.FatalErr() != nil {
		t.Errorf("plain error: item %v, fatal %v; want a failed item, not fatal", embs[0].Err, e2.FatalErr())
	}
}

// TestWarmupStrictAndBestEffort: a grid shape that fails to warm up fails
// New by default; with WarmupBestEffort it is skipped and the ceiling is
// what did warm; a fatal build error fails New either way.
func TestWarmupStrictAndBestEffort(t *testing.T) {
	cfg := testConfig()
	cfg.NoWarmup = false
	cfg.Warmup = []Shape{{1, 8}, {1, 16}, {1, 32}}
	cfg.Guard, cfg.GuardSeq = true, 16
	if _, err := New(context.Background(), cfg, fakeTok{}, fakeModel(64), seqFactory(32, errBoom)); !errors.Is(err, errBoom) {
		t.Fatalf("strict: New = %v, want the warm-up failure", err)
	}
	cfg.WarmupBestEffort = true
	e, err := New(context.Background(), cfg, fakeTok{}, fakeModel(64), seqFactory(32, errBoom))
	if err != nil {
		t.Fatalf("best effort: %v", err)
	}
	defer e.Close()
	if f := e.WarmupFailures(); len(f) != 1 || !strings.Contains(f[0].Error(), "1x32") {
		t.Errorf("failures %v; want 1x32", f)
	}
	if c := e.Stats().Ceiling; c != 16 {
		t.Errorf("ceiling %d after 1x32 failed, want 16", c)
	}
	if _, err := New(context.Background(), cfg, fakeTok{}, fakeModel(64), seqFactory(32, errTRTBuild)); !errors.Is(err, ErrFatal) {
		t.Errorf("best effort, fatal: New = %v, want ErrFatal", err)
	}
}
