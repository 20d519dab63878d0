package fleet_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/fleet"
)

// TestTableWriteEscapesRecordStrings: the names in records come from
// anyone who may write the bucket; printed as they are, a member name or
// a shape's builder holding terminal escapes or newlines would rewrite the
// operator's terminal or forge rows of `jetembed fleet`.
func TestTableWriteEscapesRecordStrings(t *testing.T) {
	evil := "x\x1b]0;owned\x07\x1b[2J\nFORGED\trow"
	tab := fleet.Table{
		Members: []fleet.MemberEntry{{Key: "member.x", MemberRecord: fleet.MemberRecord{Name: evil, Model: evil, SM: "cpu"}}},
		Groups:  []fleet.Group{{Model: "m", SM: "cpu", Members: []string{evil}}},
		Shapes:  []fleet.ShapeEntry{{Key: fleet.ShapeKey{Model: "m", SM: "cpu", Batch: 1, Seq: 8}, ShapeRecord: fleet.ShapeRecord{By: evil}}},
		Wants:   []fleet.KeyEntry{{By: evil}},
		Probes:  []fleet.ProbeEntry{{ProbeRecord: fleet.ProbeRecord{By: evil}}},
		Unknown: []string{evil},
	}
	var buf bytes.Buffer
	if err := tab.Write(&buf, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("the table holds a raw control character:\n%q", out)
	}
	if strings.Contains(out, "\nFORGED") {
		t.Errorf("a record's name forged a line of the table:\n%s", out)
	}
}
