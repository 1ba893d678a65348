package diff

import "testing"

// TestLineCounts: the counts `git diff --numstat` gives for the same pairs.
func TestLineCounts(t *testing.T) {
	for _, tc := range []struct {
		before, after string
		add, del      int
	}{
		{"a\nb\n", "a\nb\n", 0, 0},
		{"", "a\nb\n", 2, 0},
		{"a\nb\n", "", 0, 2},
		{"a\nb\nc\n", "a\nB\nc\n", 1, 1},
		{"a\nb", "a\nb\n", 1, 1}, // a newline added at the end changes the last line
		{"a\n", "a\nb", 1, 0},    // a last line without a newline is a line
		{"a\x00\n", "b\n", 0, 0}, // binary
	} {
		if a, d := LineCounts([]byte(tc.before), []byte(tc.after)); a != tc.add || d != tc.del {
			t.Errorf("LineCounts(%q, %q) = +%d -%d, want +%d -%d", tc.before, tc.after, a, d, tc.add, tc.del)
		}
	}
}
