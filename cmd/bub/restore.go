package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/bub-bus/bub/bus/store"
)

func init() {
	register("restore", "put a bub backup in place as a stopped bus's store", runRestore)
}

// runRestore is the other half of bub backup. It exists, rather than a
// cp, because the copy should be checked before it replaces anything, the
// store it replaces should be kept, and the image has no cp: in a
// container it reads the copy from standard input, so the file's owner
// on the host does not matter and the result belongs to the bus's user.
func runRestore(_ context.Context, std stdio, args []string) int {
	var dataDir string
	fs := newFlagSet(std, "restore FILE [flags]", "restore FILE [flags]\n\n"+
		"Puts FILE, a copy made by bub backup (- for standard input), in place as the store in\n"+
		"--data-dir, for a bus that is stopped. The copy is checked first, as bub serve checks a\n"+
		"store; the store it replaces is kept beside it as bub.db.replaced-TIME.")
	fs.StringVar(&dataDir, "data-dir", "./data", "the stopped bus's data directory (bub serve --data-dir)")
	bindEnv(fs, "data-dir") // the same BUB_DATA_DIR as the bus it restores
	file, code, ok := parseInterleaved(fs, std, args)
	if !ok {
		return code
	}
	if len(file) != 1 {
		return usagef(std, "restore", "give one FILE to restore (or - for standard input)")
	}
	var in io.Reader = std.in
	source := "standard input"
	if file[0] != "-" {
		source = file[0]
		f, err := os.Open(file[0])
		if err != nil {
			return errorf(std, "%v", err)
		}
		defer f.Close()
		in = f
	}
	replaced, err := store.Restore(dataDir, source, in)
	if err != nil {
		return errorf(std, "%v", err)
	}
	fmt.Fprintf(std.out, "restored %s into %s\n", file[0], filepath.Join(dataDir, store.FileName))
	if replaced != "" {
		fmt.Fprintf(std.out, "the store it replaced is kept as %s; delete it once the bus runs as it should\n", replaced)
	}
	return 0
}
