package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

func init() {
	register(command{
		name:    "results",
		summary: "write a submitted run's stored results in input order, without its input file",
		args:    "[flags] RUN",
		run:     runResults,
	})
}

func runResults(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("results", io)
	nf := addNATSFlags(fs)
	out := fs.String("out", "-", "output JSONL file (- for stdout)")
	fs.FlagSet.StringVar(out, "o", *out, "shorthand for --out")
	stream := fs.String("results-stream", jetstream.DefaultConfig().Results.Name, "name of the results stream, where a run's results are read back")
	tenant := addTenantFlag(fs)
	runs, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(runs) != 1 {
		return fmt.Errorf("%w: want one run id (submit prints it when it resumes; see --run)", errUsage)
	}
	log := slog.New(slog.NewTextHandler(io.err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := jetstream.Connect(ctx, forTenant(nf.options(log), *tenant))
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg := jetstream.DefaultConfig()
	cfg.Results.Name = *stream
	c, err := client.New(nc, client.WithRun(runs[0]), client.WithNames(cfg.ClientNames()), client.WithTenant(*tenant))
	if err != nil {
		return err
	}
	w := io.out
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	sp, err := newSpool()
	if err != nil {
		return err
	}
	defer sp.Close()
	b := &bulk{prefix: c.Run() + "-"}
	last := -1
	for sr, err := range c.Results(ctx, c.Run(), client.UntilCaughtUp()) {
		if errors.Is(err, client.ErrForeignResult) {
			// Not the fleet's: no job's result, whatever it says.
			log.Warn("ignoring a message of the results stream the fleet did not write", "subject", sr.Subject, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("results of run %s: %w", c.Run(), err)
		}
		k, ok := b.jobNumber(sr.ID)
		if !ok {
			continue
		}
		if err := sp.Put(k, sr.Result); err != nil {
			return err
		}
		last = max(last, k)
	}
	if last < 0 {
		return fmt.Errorf("run %s has no stored results (kept %v after they are stored: --results-max-age of provision)", c.Run(), cfg.Results.MaxAge)
	}
	lines, failed, missing, err := writeSpooled(w, sp, last, c.Run())
	if err != nil {
		return err
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d jobs of run %s have no stored result (not finished, or every line failed before submission); %d lines written", missing, last+1, c.Run(), lines)
	}
	// On stderr: stdout may be the JSONL itself.
	where := *out
	if where == "-" {
		where = "stdout"
	}
	fmt.Fprintf(io.err, "wrote %d lines (%d failed) of run %s to %s\n", lines, failed, c.Run(), where)
	return linesFailed(failed, lines)
}

// writeSpooled writes the input lines of jobs 0..last from the spool, in
// order, and counts the lines, the failed ones and the jobs with no result.
func writeSpooled(w io.Writer, sp *spool, last int, run string) (lines, failed, missing int, err error) {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for k := 0; k <= last; k++ {
		res, err := sp.Take(k)
		if err != nil {
			return 0, 0, 0, err
		}
		if res == nil {
			missing++
			continue
		}
		j, err := jobFromMeta(res.Meta)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("job %d of run %s: %w", k, run, err)
		}
		n, f, err := writeJobLines(enc, j, res)
		if err != nil {
			return 0, 0, 0, err
		}
		lines, failed = lines+n, failed+f
	}
	return lines, failed, missing, bw.Flush()
}

// jobFromMeta rebuilds a job's input lines from the meta submit gave it
// (see [jobMeta]).
func jobFromMeta(meta map[string]any) (*bulkJob, error) {
	ids, ok := meta["lines"].([]any)
	if !ok {
		return nil, fmt.Errorf("result has no input lines in its meta (submitted by an older jetembed?)")
	}
	failed, _ := meta["failed"].([]any)
	j := &bulkJob{texts: len(ids)}
	next := 0
	add := func() {
		j.lines = append(j.lines, lineMeta{id: fmt.Sprint(ids[next])})
		next++
	}
	for _, f := range failed {
		m, _ := f.(map[string]any)
		at, err := strconv.Atoi(fmt.Sprint(m["at"]))
		if err != nil || at < len(j.lines) {
			return nil, fmt.Errorf("bad failed line in meta: %v", f)
		}
		for len(j.lines) < at && next < len(ids) {
			add()
		}
		j.lines = append(j.lines, lineMeta{id: fmt.Sprint(m["id"]),
			err: &schema.Error{Code: schema.Code(fmt.Sprint(m["code"])), Message: fmt.Sprint(m["message"])}})
	}
	for next < len(ids) {
		add()
	}
	return j, nil
}
