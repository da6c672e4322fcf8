package gateway

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The mirror follows the database: a torn last line is cut, and a lost
// or short mirror is caught up from the database at the next open.
func TestAuditMirrorCatchesUp(t *testing.T) {
	dir := t.TempDir()
	write := func(st *state, n int) {
		for i := 0; i < n; i++ {
			err := st.update(time.Now(), func(tx *txn) error {
				return tx.audit(AuditRecord{Event: "query", Controller: "main", Reader: "researcher", Outcome: "ok"})
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	st, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	write(st, 3)
	st.close()
	path := filepath.Join(dir, AuditFileName)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":4,"ev`) // a crash mid-write
	f.Close()
	if got, _ := ReadAudit(dir, nil); len(got) != 3 {
		t.Fatalf("with a torn line: %d records, want the 3 whole ones", len(got))
	}

	st, err = openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	write(st, 1)
	st.close()
	got, err := ReadAudit(dir, nil)
	if err != nil || len(got) != 4 || got[3].Seq != 4 {
		t.Fatalf("after reopen: %+v, %v; want seq 1..4", got, err)
	}

	os.Remove(path)
	st, err = openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.close()
	got, _ = ReadAudit(dir, func(r *AuditRecord) bool { return r.Seq > 2 })
	if len(got) != 2 || got[0].Seq != 3 {
		t.Fatalf("rebuilt mirror filtered to seq > 2: %+v", got)
	}
}
