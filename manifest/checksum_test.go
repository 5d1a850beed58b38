package manifest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
)

// Test helpers that recompute the checksums of a damaged object, so that
// the structural checks behind them (lengths, offset tables, entries)
// stay tested and fuzzed: a lie with valid checksums is what a buggy
// writer would store.

// fixWorkerCRCs recomputes a worker manifest container's checksums from
// its bytes: the table's and the entry blocks' (in the header, which is
// rewritten with them when it is a JSON object), then the header's. What
// is too short or not JSON is left as it is.
func fixWorkerCRCs(b []byte) []byte {
	if len(b) < workerPreamble || string(b[:4]) != workerMagic {
		return b
	}
	hl := int64(binary.LittleEndian.Uint32(b[4:]))
	if hl > int64(len(b)-workerPreamble) {
		return b
	}
	h := b[workerPreamble : workerPreamble+hl]
	rest := b[workerPreamble+hl:]
	var m map[string]json.RawMessage
	var w Worker
	if json.Unmarshal(h, &m) == nil && m != nil && json.Unmarshal(h, &w) == nil &&
		w.Partitions >= 1 && w.Partitions <= MaxPartitions && len(rest) >= 4*(w.Partitions+1) {
		table, entries := rest[:4*(w.Partitions+1)], rest[4*(w.Partitions+1):]
		block := w.EntryBlock
		if block < 1 || block > maxEntryBlock {
			block = WorkerEntryBlock
		}
		entries = entries[:len(entries)/EntrySize*EntrySize]
		m["table_crc32c"] = json.RawMessage(strconv.FormatUint(uint64(crc32c(table)), 10))
		m["entry_block"] = json.RawMessage(strconv.Itoa(block))
		crcs, _ := json.Marshal(blockSums(entries, block, 0, 0))
		m["entry_crcs"] = crcs
		if nh, err := json.Marshal(m); err == nil {
			h = nh
		}
	}
	out := append([]byte(workerMagic), binary.LittleEndian.AppendUint32(nil, uint32(len(h)))...)
	out = binary.LittleEndian.AppendUint32(out, headerCRC(out, h))
	out = append(out, h...)
	return append(out, rest...)
}

// fixStageCRC gives a stage manifest the checksum its bytes have: the
// trailer is replaced (or added to a JSON object that has none).
func fixStageCRC(b []byte) []byte {
	if n := len(b) - stageTrailerLen; n > 0 && bytes.HasPrefix(b[n:], []byte(stageTrailerHead)) {
		b = append(b[:n:n], '}')
	}
	if len(b) < 2 || b[len(b)-1] != '}' {
		return b
	}
	return appendStageCRC(b)
}

// fixIndexCRCs rewrites a stage manifest's index checksums (entry blocks
// and summary) to those of the index object ib, where the manifest says
// its sections are, and then the manifest's own checksum.
func fixIndexCRCs(mb, ib []byte) ([]byte, error) {
	body := mb
	if n := len(mb) - stageTrailerLen; n > 0 {
		body = append(mb[:n:n], '}')
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if m["index"] == nil {
		return fixStageCRC(mb), nil
	}
	var x Index
	if err := json.Unmarshal(m["index"], &x); err != nil {
		return nil, err
	}
	var xm map[string]json.RawMessage
	if err := json.Unmarshal(m["index"], &xm); err != nil {
		return nil, err
	}
	if x.EntryBlock < 1 || x.EntryBlock > maxEntryBlock {
		return nil, fmt.Errorf("entry_block %d", x.EntryBlock)
	}
	end := min(int64(len(ib)), x.EntriesOffset+EntrySize*x.Entries)
	if x.EntriesOffset > end || x.EntriesOffset < 0 {
		return nil, fmt.Errorf("entries at %d of %d bytes", x.EntriesOffset, len(ib))
	}
	crcs := blockSums(ib[x.EntriesOffset:end], x.EntryBlock, crc32c(ib[:x.EntriesOffset]), 1)
	xm["entry_crcs"], _ = json.Marshal(crcs)
	if x.SummaryOffset >= 0 && x.SummaryOffset <= int64(len(ib)) {
		xm["summary_crc32c"] = json.RawMessage(strconv.FormatUint(uint64(crc32c(ib[x.SummaryOffset:])), 10))
	}
	m["index"], _ = json.Marshal(xm)
	nb, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return appendStageCRC(nb), nil
}
