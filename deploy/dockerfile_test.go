package deploy

import (
	"regexp"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with continuation lines joined.
type instruction struct{ cmd, args string }

// parseDockerfile returns the instructions of each stage, in order.
func parseDockerfile(t *testing.T, path string) [][]instruction {
	t.Helper()
	var stages [][]instruction
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("%s: %s before the first FROM", path, in.cmd)
			}
			return
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	for _, line := range strings.Split(readFile(t, path), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return stages
}

func last(stage []instruction, cmd string) string {
	v := ""
	for _, in := range stage {
		if in.cmd == cmd {
			v = in.args
		}
	}
	return v
}

var envPair = regexp.MustCompile(`([A-Z_]+)=(\S+)`)

// TestDockerfiles checks what the runtime stage of both images promises:
// a non-root user, jetembed as entrypoint with serve as default, and
// JETEMBED_ORT_LIB pointing where the library is copied.
func TestDockerfiles(t *testing.T) {
	for _, tc := range []struct {
		path, provider string
	}{{"../Dockerfile", "cpu"}, {"../Dockerfile.cuda", "tensorrt"}} {
		stages := parseDockerfile(t, tc.path)
		if len(stages) < 2 {
			t.Errorf("%s: %d stages, want a builder and a runtime stage", tc.path, len(stages))
			continue
		}
		rt := stages[len(stages)-1]
		if u := last(rt, "USER"); u == "" || strings.HasPrefix(u, "0") || strings.HasPrefix(u, "root") {
			t.Errorf("%s: runtime user %q, want non-root", tc.path, u)
		}
		if e := last(rt, "ENTRYPOINT"); e != `["jetembed"]` {
			t.Errorf("%s: ENTRYPOINT %s", tc.path, e)
		}
		if c := last(rt, "CMD"); c != `["serve"]` {
			t.Errorf("%s: CMD %s, want [\"serve\"]", tc.path, c)
		}
		env := map[string]string{}
		for _, in := range rt {
			if in.cmd == "ENV" {
				for _, m := range envPair.FindAllStringSubmatch(in.args, -1) {
					env[m[1]] = m[2]
				}
			}
		}
		if env["JETEMBED_PROVIDER"] != tc.provider {
			t.Errorf("%s: JETEMBED_PROVIDER=%q, want %q", tc.path, env["JETEMBED_PROVIDER"], tc.provider)
		}
		lib := env["JETEMBED_ORT_LIB"]
		copied := false
		for _, in := range rt {
			if in.cmd != "COPY" {
				continue
			}
			f := strings.Fields(in.args)
			dst := f[len(f)-1]
			if dst == lib || (strings.HasSuffix(dst, "/") && strings.HasPrefix(lib, dst)) {
				copied = true
			}
		}
		if lib == "" || !copied {
			t.Errorf("%s: JETEMBED_ORT_LIB=%q is not where a COPY puts the library", tc.path, lib)
		}
		if !strings.HasPrefix(env["JETEMBED_HTTP"], "0.0.0.0:") {
			t.Errorf("%s: JETEMBED_HTTP=%q; in a container the probes come from outside", tc.path, env["JETEMBED_HTTP"])
		}
		if !strings.Contains(strings.Join(argsOf(stages[0], "RUN"), "\n"), "CGO_ENABLED=1 go build") {
			t.Errorf("%s: builder does not build with cgo", tc.path)
		}
	}

	// The CPU image gets ORT the way `make deps` does, hash check included.
	cpu := strings.Join(argsOf(parseDockerfile(t, "../Dockerfile")[0], "RUN"), "\n")
	if !strings.Contains(cpu, "./scripts/deps.sh") {
		t.Error("Dockerfile does not fetch ONNX Runtime through scripts/deps.sh")
	}
	// The GPU image refuses an unpinned download.
	cuda := strings.Join(argsOf(parseDockerfile(t, "../Dockerfile.cuda")[1], "RUN"), "\n")
	if !strings.Contains(cuda, `sha256sum -c`) || !strings.Contains(cuda, `test -n "${ORT_GPU_SHA256}"`) {
		t.Error("Dockerfile.cuda does not require and check the ORT GPU tarball sha256")
	}
	if !strings.Contains(readFile(t, "../Dockerfile.cuda"), "VOLUME [\"/var/cache/jetembed/trt\"]") {
		t.Error("Dockerfile.cuda does not declare the engine cache volume")
	}
}

func argsOf(stage []instruction, cmd string) []string {
	var out []string
	for _, in := range stage {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}
