package main

import "testing"

func TestPackageVersion(t *testing.T) {
	for _, tc := range []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-4-gabc1234", "1.2.3+4.gabc1234"},
		{"v1.2.3-dirty", "1.2.3+0.dirty"},
		{"v1.2.3-4-gabc1234-dirty", "1.2.3+4.gabc1234.dirty"},
		{"72a5af7", "0.0.0+git20261201.72a5af7"},
		{"72a5af7-dirty", "0.0.0+git20261201.72a5af7.dirty"},
	} {
		got, err := packageVersion(tc.describe, "20261201")
		if err != nil || got != tc.want {
			t.Errorf("packageVersion(%q) = %q, %v; want %q", tc.describe, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "release-1", "v1.2", "v1.2.3-rc1", "xyz"} {
		if got, err := packageVersion(bad, "20261201"); err == nil {
			t.Errorf("packageVersion(%q) = %q, want an error", bad, got)
		}
	}
}
