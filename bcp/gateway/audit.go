package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// AuditFileName is the audit log's mirror in the data directory: one JSON
// record per line, in order. The database holds the log; the mirror
// exists so that bub bcp audit can read it while the gateway runs and
// holds the database.
const AuditFileName = "audit.jsonl"

// auditMirror appends committed audit records to the mirror file.
type auditMirror struct {
	f       *os.File
	lastSeq uint64
	broken  bool // a write failed; the next start catches up
}

// openAuditMirror opens the mirror and brings it up to date with the
// database: a torn last line (a crash mid-write) is cut off, and records
// it lacks are appended.
func openAuditMirror(path string, st *state) (*auditMirror, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bcp gateway: audit mirror %s: %w", path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bcp gateway: read audit mirror %s: %w", path, err)
	}
	keep := bytes.LastIndexByte(data, '\n') + 1
	m := &auditMirror{f: f}
	if keep > 0 {
		lines := bytes.Split(bytes.TrimSuffix(data[:keep], []byte("\n")), []byte("\n"))
		var last AuditRecord
		if err := json.Unmarshal(lines[len(lines)-1], &last); err != nil {
			f.Close()
			return nil, fmt.Errorf("bcp gateway: audit mirror %s: last line: %w (move the file away; the gateway rewrites it from its database)", path, err)
		}
		m.lastSeq = last.Seq
	}
	if err := f.Truncate(int64(keep)); err != nil {
		f.Close()
		return nil, fmt.Errorf("bcp gateway: audit mirror %s: %w", path, err)
	}
	if _, err := f.Seek(int64(keep), io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	missing, err := st.auditLog(m.lastSeq)
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := m.write(missing); err != nil {
		f.Close()
		return nil, fmt.Errorf("bcp gateway: audit mirror %s: %w", path, err)
	}
	return m, nil
}

func (m *auditMirror) write(records []AuditRecord) error {
	var buf bytes.Buffer
	for _, r := range records {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if _, err := m.f.Write(buf.Bytes()); err != nil {
		return err
	}
	if len(records) > 0 {
		m.lastSeq = records[len(records)-1].Seq
	}
	return nil
}

// append writes records after a commit. After a failure it stops, so the
// mirror never has a gap in the middle; the next start catches up.
func (m *auditMirror) append(records []AuditRecord) {
	if m.broken {
		return
	}
	if err := m.write(records); err != nil {
		m.broken = true
	}
}

func (m *auditMirror) close() error { return m.f.Close() }

// ReadAudit reads the audit mirror of a data directory, keeping the
// records keep accepts (nil keeps all). It needs no lock: the gateway
// only appends whole lines, and a torn last line is skipped.
func ReadAudit(dataDir string, keep func(*AuditRecord) bool) ([]AuditRecord, error) {
	path := dataDir + string(os.PathSeparator) + AuditFileName
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bcp audit: %w (is --data-dir the gateway's?)", err)
	}
	defer f.Close()
	var out []AuditRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var r AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			// A line being written right now; everything before it is
			// whole.
			break
		}
		if keep == nil || keep(&r) {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}
