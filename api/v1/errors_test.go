package v1_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// docs/errors.md documents exactly the codes of v1.Codes, each with the
// same HTTP status and retryability.
func TestErrorTableMatchesTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\| (\\d{3}|—) \\| (yes|no) \\|")
	var documented []v1.CodeInfo
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		status := 0
		if m[2] != "—" {
			status, _ = strconv.Atoi(m[2])
		}
		documented = append(documented, v1.CodeInfo{Code: m[1], Status: status, Retryable: m[3] == "yes"})
	}
	if diff := cmp.Diff(v1.Codes, documented); diff != "" {
		t.Errorf("docs/errors.md's table differs from v1.Codes (-code +docs):\n%s", diff)
	}
	for _, c := range v1.Codes {
		if got, ok := v1.LookupCode(c.Code); !ok || got != c {
			t.Errorf("LookupCode(%s) = %+v, %v", c.Code, got, ok)
		}
	}
	if _, ok := v1.LookupCode("NoSuchCode"); ok {
		t.Error("LookupCode found a code that is not in the table")
	}
}
