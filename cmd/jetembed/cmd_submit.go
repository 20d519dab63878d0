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
