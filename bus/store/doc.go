// Package store keeps the bus's pending deliveries (retries and held
// messages) and its dead-letter queue in an embedded bbolt file, so that
// they survive a restart or a crash of the bus.
//
// Open returns a Store backed by dir/bub.db; OpenMemory returns one that
// keeps everything in memory, for tests. Both behave alike, and one test
// suite runs against both.
//
// # Durability
//
// Every method that writes commits one bbolt transaction, fsync included
// (fdatasync on Linux), before it returns: once PutPending, DeletePending,
// DeadLetter, RemoveDeadLetter, Requeue or PurgeDeadLetters has returned
// nil, the change survives a crash of the process or of the machine. A
// method that returns an error has changed nothing. DeadLetter (remove a
// pending entry, add a dead letter) and Requeue (remove a dead letter, add
// a pending entry) are single transactions, so a crash leaves either the
// state before or the state after, never both or neither.
//
// bbolt writes copy-on-write pages and then one of two alternating meta
// pages, so a crash in the middle of a commit leaves the last committed
// state. Options.NoSync gives this up for speed and is for benchmarks
// only. Each commit costs an fsync of the file and one of its meta page:
// about 0.3 ms on a virtual ext4 disk, several milliseconds on slow or
// busy disks (BenchmarkPutPending). Writes are serialized, and writes
// made while a commit runs share the next one (group commit, commit.go):
// one transaction and one fsync for all of them, each returning only once
// it is durable. A write alone is committed at once, with no added delay;
// under load the throughput is the number of concurrent writers per
// fsync (BenchmarkPutPendingConcurrent).
//
// # Layout
//
// The file has three buckets:
//
//	meta         "version" → the layout version, "2"
//	pending      8-byte big-endian sequence → a Pending as JSON
//	deadletters  8-byte big-endian sequence → a DeadLetter as JSON
//	toolsubscriptions  SHA-256 of a callback id, in hex → a ToolSubscription
//
// The sequence comes from the bucket's NextSequence, which is stored in
// the file, so ids ("p-000000000042", "d-000000000042") are never reused,
// even after a restart, and dead letters are listed in the order they
// were added. Each record carries a version, "v": 2, so that the format
// can change, and ends in its checksum, "crc32c": the CRC-32C of the
// record without it (record.go). bbolt checksums only its meta pages, so
// without it a byte changed inside a record by a bad disk or a stray
// write would be read, and delivered, as it now is.
//
// Open checks every record's checksum, and that each holds the id of its
// key, and refuses the file (ErrCorrupt) naming the first record that
// fails; a read that meets a record damaged later fails with ErrDamaged,
// naming the record and the file. Neither error shows a record's bytes.
// Format 1, without checksums ("v": 1), is upgraded by Open in place,
// every record decoded in full and written again with its checksum, in
// one transaction; TestOpensFormat1 opens one (testdata/format1). A
// record without a checksum is read only if it is of version 1. A record
// that does not decode, or is newer than this program, is reported with
// its bucket and id, never skipped silently.
// Values are JSON so that the bbolt command (go.etcd.io/bbolt/cmd/bbolt)
// can show them while the bus is stopped: bbolt keys --format hex
// data/bub.db deadletters, then bbolt get --parse-format hex data/bub.db
// deadletters 000000000000002a.
//
// # Caveats
//
//   - One process at a time: Open locks the file, and a second Open, from
//     this process or another, fails after about a second. Tools that read
//     the queue while the bus runs must ask the bus.
//   - The file never shrinks: space freed by removals is reused, not given
//     back. `bbolt compact` rewrites the file while the bus is stopped.
//   - Open refuses a damaged file (ErrCorrupt), and a missing file is a
//     fresh store but an empty one is damage; integrity.go says what is
//     checked and why. Open reads every page of the file to check it, so
//     opening a large store takes time. If bbolt panics inside Open on a
//     file that passed the header checks, the file stays mapped, and so
//     locked, until the process exits.
//   - Pending and ListDeadLetters read records into memory; Pending reads
//     all of them, which suits resuming after a restart, not a hot path.
//     PendingSchedule reads all of them without payloads and meta, which
//     is what the bus resumes from; LoadMessage reads one entry's back.
package store
