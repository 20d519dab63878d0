package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

func init() {
	register(command{
		name:    "submit",
		summary: "queue JSONL texts as jobs and write their results in input order (resumable), or --text for one vector now",
		run:     runSubmit,
	})
}

type submitFlags struct {
	json        *bool
	outputs     *string
	noTruncate  *bool
	jobSize     *int
	maxInFlight *int
	run         *string
	out         *string
	text        *string
	timeout     *time.Duration
}

func runSubmit(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("submit", io)
	nf := addNATSFlags(fs)
	f := submitFlags{
		json:        fs.Bool("json", false, "send jobs as JSON instead of msgpack"),
		outputs:     fs.String("outputs", "dense", "vectors to compute: dense, sparse, colbert (comma separated)"),
		noTruncate:  fs.Bool("no-truncate", false, "fail texts over the model's maximum with text_too_long instead of cutting them"),
		jobSize:     fs.Int("job-size", 32, "texts per job"),
		maxInFlight: fs.Int("max-inflight", 64, "jobs submitted and not yet answered"),
		run:         fs.String("run", "", "run id: jobs go to embed.jobs.<run>, results to embed.results.<run>.<job> (default: derived from the input and the job settings, so a rerun resumes)"),
		out:         fs.String("out", "-", "output JSONL file (- for stdout)"),
		text:        fs.String("text", "", "embed this one text now through the request-reply endpoint and print the JSON result"),
		timeout:     fs.Duration("timeout", 30*time.Second, "with --text: how long to wait for the answer"),
	}
	fs.FlagSet.StringVar(f.out, "o", *f.out, "shorthand for --out")
	// Flags may follow the input file (submit in.jsonl -o out.jsonl); the
	// flag package stops at the first argument, so parse again after it.
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		files, args = append(files, fs.Arg(0)), fs.Args()[1:]
	}
	outs, err := schema.ParseOutputs(*f.outputs)
	if err != nil {
		return fmt.Errorf("%w: --outputs: %w", errUsage, err)
	}
	log := slog.New(slog.NewTextHandler(io.err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *f.text != "" {
		if len(files) > 0 {
			return fmt.Errorf("%w: --text takes no input file", errUsage)
		}
		return submitText(ctx, nf.options(log), f, outs, io)
	}
	if len(files) != 1 {
		return fmt.Errorf("%w: want one input file (JSONL, - for stdin) or --text", errUsage)
	}
	if *f.jobSize < 1 || *f.maxInFlight < 1 {
		return fmt.Errorf("%w: --job-size and --max-inflight must be positive", errUsage)
	}
	in, err := readInput(files[0], io.in)
	if err != nil {
		return err
	}
	if *f.run == "" {
		if files[0] == "-" {
			return fmt.Errorf("%w: input from stdin needs --run (a resumed run must find its results)", errUsage)
		}
		*f.run = deriveRun(in, f)
	}
	b := newBulk(in, *f.jobSize, *f.run)
	w := io.out
	if *f.out != "-" {
		file, err := os.Create(*f.out)
		if err != nil {
			return err
		}
		defer file.Close()
		w = file
	}
	nc, err := jetstream.Connect(ctx, nf.options(log))
	if err != nil {
		return err
	}
	defer nc.Close()
	opts := []jetstream.ClientOption{jetstream.WithRun(*f.run)}
	if *f.json {
		opts = append(opts, jetstream.WithJSON())
	}
	c, err := jetstream.NewClient(nc, opts...)
	if err != nil {
		return err
	}
	err = b.run(ctx, c, f, outs, w, io.err, log)
	if ferr := nc.Drain(); err == nil && ferr != nil {
		err = ferr
	}
	return err
}

func submitText(ctx context.Context, o jetstream.Options, f submitFlags, outs []schema.Output, io stdio) error {
	nc, err := jetstream.Connect(ctx, o)
	if err != nil {
		return err
	}
	defer nc.Close()
	opts := []jetstream.ClientOption{jetstream.WithOutputs(outs...)}
	if *f.json {
		opts = append(opts, jetstream.WithJSON())
	}
	c, err := jetstream.NewClient(nc, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	job := schema.NewJob(fmt.Sprintf("text-%d", time.Now().UnixNano()), *f.text)
	job.Outputs = outs
	if *f.noTruncate {
		no := false
		job.Truncate = &no
	}
	res, rerr := c.Request(ctx, job)
	if res == nil {
		return rerr
	}
	data, err := schema.EncodeResult(res, schema.EncodingJSON)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "%s\n", data)
	return rerr
}

// inputLine is one line of the input file: a text with its id, or why it
// has none.
type inputLine struct {
	id   string
	text string
	err  *schema.Error
}

func readInput(path string, stdin io.Reader) ([]inputLine, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var lines []inputLine
	for sc.Scan() {
		var v struct {
			ID   any     `json:"id"`
			Text *string `json:"text"`
		}
		l := inputLine{id: strconv.Itoa(len(lines) + 1)}
		switch err := json.Unmarshal(sc.Bytes(), &v); {
		case err != nil:
			l.err = schema.Errorf(schema.CodeBadPayload, "line is not a JSON object: %v", err)
		case v.Text == nil:
			l.err = schema.Errorf(schema.CodeBadPayload, `line has no "text" string`)
		default:
			l.text = *v.Text
		}
		if v.ID != nil {
			l.id = fmt.Sprint(v.ID)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return lines, nil
}

// deriveRun names a run after its input and the settings that shape its
// jobs: the same command on the same file resumes, a changed one does not
// mix with it.
func deriveRun(in []inputLine, f submitFlags) string {
	h := sha256.New()
	fmt.Fprintf(h, "v1 job-size=%d outputs=%s truncate=%v\n", *f.jobSize, *f.outputs, !*f.noTruncate)
	for _, l := range in {
		fmt.Fprintf(h, "%q %q %v\n", l.id, l.text, l.err != nil)
	}
	return "r" + hex.EncodeToString(h.Sum(nil))[:16]
}

// outputLine is one line of the output: the input's id and its item.
type outputLine struct {
	ID string `json:"id"`
	schema.Item
}

// bulkJob is one job of a bulk run: the input lines it covers.
type bulkJob struct {
	id     string
	lines  []int // indexes into in
	texts  int   // lines with a text
	result *schema.Result
	// written: its lines are out and its result freed.
	written bool
}

type bulk struct {
	in   []inputLine
	jobs []*bulkJob
	byID map[string]*bulkJob
}

func newBulk(in []inputLine, size int, run string) *bulk {
	b := &bulk{in: in, byID: map[string]*bulkJob{}}
	for start := 0; start < len(in); start += size {
		j := &bulkJob{id: fmt.Sprintf("%s-%d", run, len(b.jobs))}
		for i := start; i < min(start+size, len(in)); i++ {
			j.lines = append(j.lines, i)
			if in[i].err == nil {
				j.texts++
			}
		}
		b.jobs = append(b.jobs, j)
		b.byID[j.id] = j
	}
	return b
}

// run resumes what the results stream already holds, submits the other
// jobs with at most --max-inflight unanswered, and writes every line in
// input order as soon as the jobs before it are done.
func (b *bulk) run(ctx context.Context, c *jetstream.Client, f submitFlags, outs []schema.Output, w io.Writer, errw io.Writer, log *slog.Logger) error {
	var (
		mu      sync.Mutex
		lastSeq uint64
		done    int
	)
	for sr, err := range c.Results(ctx, c.Run(), jetstream.UntilCaughtUp()) {
		if errors.Is(err, jetstream.ErrBadResult) {
			// The job runs again; its new result will be read.
			log.Warn("stored result skipped", "err", err)
			lastSeq = sr.Sequence
			continue
		}
		if err != nil {
			return err
		}
		lastSeq = sr.Sequence
		if j := b.byID[sr.ID]; j != nil && j.result == nil {
			j.result = sr.Result
			done++
		}
	}
	total := 0
	for _, j := range b.jobs {
		if j.result == nil {
			total += j.texts
		}
	}
	if done > 0 {
		fmt.Fprintf(errw, "resuming run %s: %d of %d jobs already done\n", c.Run(), done, len(b.jobs))
	}
	bar := newBar(errw, total)
	out := bufio.NewWriter(w)
	enc := json.NewEncoder(out)
	next := 0
	// flush writes the lines of the finished jobs at the head; mu held.
	flush := func() error {
		for next < len(b.jobs) && (b.jobs[next].result != nil || b.jobs[next].texts == 0) {
			if err := b.write(enc, b.jobs[next]); err != nil {
				return err
			}
			b.jobs[next].result, b.jobs[next].written = nil, true
			next++
		}
		return nil
	}
	mu.Lock()
	err := flush()
	mu.Unlock()
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	slots := make(chan struct{}, *f.maxInFlight)
	submitted := map[string]bool{}
	allDone := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for sr, err := range c.Results(ctx, c.Run(), jetstream.AfterSequence(lastSeq)) {
			if errors.Is(err, jetstream.ErrBadResult) {
				log.Warn("result skipped", "err", err)
				continue
			}
			if err != nil {
				cancel(err)
				return
			}
			mu.Lock()
			j := b.byID[sr.ID]
			if j == nil || j.result != nil || j.written {
				mu.Unlock()
				continue
			}
			j.result = sr.Result
			if submitted[j.id] {
				delete(submitted, j.id)
				<-slots
			}
			bar.add(j.texts)
			err = flush()
			finished := next == len(b.jobs)
			mu.Unlock()
			if err != nil {
				cancel(err)
				return
			}
			if finished {
				close(allDone)
				return
			}
		}
	}()
	for _, j := range b.jobs {
		mu.Lock()
		skip := j.result != nil || j.texts == 0 || j.written
		mu.Unlock()
		if skip {
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return b.stopped(ctx, readerDone, out, bar)
		}
		mu.Lock()
		submitted[j.id] = true
		mu.Unlock()
		if _, err := c.Submit(ctx, b.job(j, outs, *f.noTruncate)); err != nil {
			cancel(err)
			return b.stopped(ctx, readerDone, out, bar)
		}
	}
	mu.Lock()
	finished := next == len(b.jobs)
	mu.Unlock()
	if !finished {
		select {
		case <-allDone:
		case <-ctx.Done():
			return b.stopped(ctx, readerDone, out, bar)
		}
	}
	cancel(nil)
	<-readerDone
	bar.finish()
	return out.Flush()
}

// stopped ends an interrupted run: what is written stays, and the error
// says how to resume.
func (b *bulk) stopped(ctx context.Context, readerDone <-chan struct{}, out *bufio.Writer, bar *bar) error {
	<-readerDone
	bar.finish()
	_ = out.Flush()
	err := context.Cause(ctx)
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted: run the same command again to resume")
	}
	return fmt.Errorf("%w (run the same command again to resume)", err)
}

func (b *bulk) job(j *bulkJob, outs []schema.Output, noTruncate bool) *schema.Job {
	sj := &schema.Job{V: schema.Version, ID: j.id, Outputs: outs}
	if noTruncate {
		no := false
		sj.Truncate = &no
	}
	for _, i := range j.lines {
		if b.in[i].err == nil {
			sj.Texts = append(sj.Texts, b.in[i].text)
		}
	}
	return sj
}

// write writes one line per input line of j: its item, the job's error, or
// the line's own error.
func (b *bulk) write(enc *json.Encoder, j *bulkJob) error {
	k := 0
	for _, i := range j.lines {
		l := b.in[i]
		line := outputLine{ID: l.id}
		switch {
		case l.err != nil:
			line.Error = l.err
		case j.result != nil && j.result.Error != nil:
			line.Error = j.result.Error
		case j.result != nil && k < len(j.result.Items):
			line.Item = j.result.Items[k]
			k++
		default:
			line.Error = schema.Errorf(schema.CodeInternal, "result of job %s has %d items for %d texts", j.id, len(j.result.Items), j.texts)
		}
		if err := enc.Encode(line); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
	}
	return nil
}

// bar is the progress bar on a terminal: texts/s and ETA.
type bar struct{ pb *progressbar.ProgressBar }

func newBar(w io.Writer, total int) *bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || total == 0 {
		return &bar{}
	}
	return &bar{pb: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("embedding"),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("texts"),
		progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))}
}

func (b *bar) add(n int) {
	if b.pb != nil {
		_ = b.pb.Add(n)
	}
}

func (b *bar) finish() {
	if b.pb != nil {
		_ = b.pb.Finish()
	}
}
