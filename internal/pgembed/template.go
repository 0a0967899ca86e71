package pgembed

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// A fresh cluster is the same at every start: initdb's output depends only
// on the binaries, the superuser's name and its options. The first Start
// keeps a copy of it in the user's cache directory, and later starts copy
// that in place of running initdb again (about 40 MB, copied in a fraction
// of initdb's time). POOLTOP_INITDB_CACHE=off turns this off; deleting the
// directory is always safe.

// templateDir is where the cluster made by these binaries for user is
// kept, or "" when there is no cache directory or the cache is off.
func templateDir(binDir, user string) string {
	if os.Getenv("POOLTOP_INITDB_CACHE") == "off" {
		return ""
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", binDir, user, initdbFlags)
	for _, name := range []string{"initdb", "postgres"} {
		st, err := os.Stat(filepath.Join(binDir, name))
		if err != nil {
			return ""
		}
		fmt.Fprintf(h, "%s %d %d\x00", name, st.Size(), st.ModTime().UnixNano())
	}
	return filepath.Join(cache, "pooltop", "initdb-"+hex.EncodeToString(h.Sum(nil))[:16])
}

// initdbFlags are initdb's options after -D and -U; part of the template's key.
var initdbFlags = []string{"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"}

// fromTemplate fills dataDir from the template, owned by cred's user when
// set; false when there is no template (or the copy failed, and nothing of
// it is left).
func fromTemplate(tmpl, dataDir string, cred *syscall.Credential) bool {
	if tmpl == "" {
		return false
	}
	if _, err := os.Stat(filepath.Join(tmpl, "PG_VERSION")); err != nil {
		return false
	}
	if err := copyTree(tmpl, dataDir, cred); err != nil {
		_ = os.RemoveAll(dataDir)
		return false
	}
	return true
}

// saveTemplate keeps a copy of the fresh cluster in dataDir as the template,
// best effort: it is copied beside and renamed, so a template is whole or
// absent, and of two processes saving at once one wins.
func saveTemplate(dataDir, tmpl string) {
	if tmpl == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(tmpl), 0o700); err != nil {
		return
	}
	tmp := tmpl + ".tmp-" + strconv.Itoa(os.Getpid())
	_ = os.RemoveAll(tmp)
	if err := copyTree(dataDir, tmp, nil); err != nil || os.Rename(tmp, tmpl) != nil {
		_ = os.RemoveAll(tmp)
	}
}

// copyTree copies the directory src to dst (which must not exist) with the
// same modes, owned by cred's user when cred is set.
func copyTree(src, dst string, cred *syscall.Credential) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFile(path, to, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("pgembed: %s: not a file or directory", path)
		}
		if cred != nil {
			return os.Lchown(to, int(cred.Uid), int(cred.Gid))
		}
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
