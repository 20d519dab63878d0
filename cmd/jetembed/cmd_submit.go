package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
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
	results     *string
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
		results:     fs.String("results-stream", jetstream.DefaultConfig().Results.Name, "name of the results stream, where a run's results are read back"),
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
	// A file is read twice, streaming: once for the run id and the size of
	// the run, once to submit it. stdin is read once.
	sum := inputSummary{jobs: -1, texts: -1}
	if files[0] != "-" {
		if sum, err = summarize(files[0], f); err != nil {
			return err
		}
	}
	if *f.run == "" {
		if files[0] == "-" {
			return fmt.Errorf("%w: input from stdin needs --run (a resumed run must find its results)", errUsage)
		}
		*f.run = sum.run
	}
	r, closeIn, err := openInput(files[0], io.in)
	if err != nil {
		return err
	}
	defer closeIn()
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
	streams := jetstream.DefaultConfig()
	streams.Results.Name = *f.results
	opts := []jetstream.ClientOption{jetstream.WithRun(*f.run), jetstream.WithStreams(streams)}
	if *f.json {
		opts = append(opts, jetstream.WithJSON())
	}
	c, err := jetstream.NewClient(nc, opts...)
	if err != nil {
		return err
	}
	b, err := newBulk(c, *f.run, f, outs, log)
	if err != nil {
		return err
	}
	defer b.close()
	err = b.run(ctx, newInputReader(r), sum, w, io.err)
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

// inputReader reads the input one line at a time, so a run of millions of
// texts never holds more of it than the jobs in flight.
type inputReader struct {
	sc *bufio.Scanner
	n  int // lines read
}

func newInputReader(r io.Reader) *inputReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	return &inputReader{sc: sc}
}

// next returns the next line; ok is false at the end or on an error (see
// Err).
func (r *inputReader) next() (l inputLine, ok bool) {
	if !r.sc.Scan() {
		return inputLine{}, false
	}
	r.n++
	var v struct {
		ID   any     `json:"id"`
		Text *string `json:"text"`
	}
	l.id = strconv.Itoa(r.n)
	switch err := json.Unmarshal(r.sc.Bytes(), &v); {
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
	return l, true
}

func (r *inputReader) Err() error { return r.sc.Err() }

// openInput opens the input file, or stdin for "-".
func openInput(path string, stdin io.Reader) (io.Reader, func(), error) {
	if path == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

// inputSummary is what a first pass over an input file learns: the run id
// it derives and the size of the run, for the progress bar.
type inputSummary struct {
	run         string
	jobs, texts int
}

// summarize reads the input file once, streaming. The run id names a run
// after its input and the settings that shape its jobs: the same command
// on the same file resumes, a changed one does not mix with it.
func summarize(path string, f submitFlags) (inputSummary, error) {
	r, closeIn, err := openInput(path, nil)
	if err != nil {
		return inputSummary{}, err
	}
	defer closeIn()
	h := sha256.New()
	fmt.Fprintf(h, "v1 job-size=%d outputs=%s truncate=%v\n", *f.jobSize, *f.outputs, !*f.noTruncate)
	in := newInputReader(r)
	var sum inputSummary
	for {
		l, ok := in.next()
		if !ok {
			break
		}
		fmt.Fprintf(h, "%q %q %v\n", l.id, l.text, l.err != nil)
		if l.err == nil {
			sum.texts++
		}
	}
	if err := in.Err(); err != nil {
		return inputSummary{}, fmt.Errorf("read %s: %w", path, err)
	}
	sum.jobs = (in.n + *f.jobSize - 1) / *f.jobSize
	sum.run = "r" + hex.EncodeToString(h.Sum(nil))[:16]
	return sum, nil
}

// bar is submit's progress bar on a terminal: texts/s and ETA. Off the
// terminal (and for a nil *bar) it does nothing.
type bar struct{ pb *progressbar.ProgressBar }

// newBar returns the bar for total texts; a negative total (stdin, read
// once) shows the rate without an ETA.
func newBar(w io.Writer, total int) *bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || total == 0 {
		return &bar{}
	}
	return &bar{pb: progressbar.NewOptions(max(total, -1),
		progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("embedding"),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("texts"),
		progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))}
}

// add counts n texts answered in this run.
func (b *bar) add(n int) {
	if b != nil && b.pb != nil {
		_ = b.pb.Add(n)
	}
}

// skip takes n texts answered by an earlier run out of the total, so that
// the rate and the ETA are this run's.
func (b *bar) skip(n int) {
	if b != nil && b.pb != nil && n > 0 && b.pb.GetMax() > 0 {
		b.pb.ChangeMax(b.pb.GetMax() - n)
	}
}

func (b *bar) finish() {
	if b != nil && b.pb != nil {
		_ = b.pb.Finish()
	}
}
