package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// markdownLink is an inline link or image: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchor is GitHub's id for a heading: lower case, spaces to hyphens,
// punctuation dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the heading ids of a markdown file, code blocks aside.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			ids[anchor(strings.TrimLeft(line, "#"))] = true
		}
	}
	return ids
}

// TestDocsLinksResolve follows every relative link of the README, the
// changelog and docs/ to a file that exists and, with a #fragment, to a
// heading in it; and holds the README to a front page.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md", "CHANGELOG.md", "CONTRIBUTING.md")
	if len(pages) < 8 {
		t.Fatalf("docs/ has %d pages; the README links to more", len(pages)-3)
	}
	links := 0
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s: %v", page, target, err)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[frag] {
				t.Errorf("%s links to %s: no heading #%s in %s", page, target, frag, path)
			}
		}
	}
	if links < 20 {
		t.Errorf("found %d relative links; the link pattern no longer matches", links)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 250 {
		t.Errorf("README.md is %d lines; it is the front page (≤ 250): move the detail to docs/", n)
	}
	for _, must := range []string{"    go run .\n", "    go test -race ./...\n"} {
		if !strings.Contains(string(readme), must) {
			t.Errorf("README.md lost its set-up command %q", strings.TrimSpace(must))
		}
	}
}
