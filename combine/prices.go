package combine

import (
	"fmt"
	"slices"
)

// Prices are a store's request classes and their list prices, in dollars
// per request: a write class (what stores and lists objects) and a read
// class (what fetches objects and their metadata). Deletes are free on
// every store priced here. Storage and transfer out of the region are
// not requests and not priced.
type Prices struct {
	// Store is the store kind, as the configuration's store key names it.
	Store string `json:"store"`
	// Tier names the service, tier and region the prices are of.
	Tier string `json:"tier"`
	// WriteClass and ReadClass are the classes as the store's price list
	// names them.
	WriteClass string  `json:"write_class"`
	ReadClass  string  `json:"read_class"`
	Write      float64 `json:"write_per_request"`
	Read       float64 `json:"read_per_request"`
	// writeOps and readOps are the operations of each class, named as
	// the store counts them (store.Counter): S3's by the AWS SDK's
	// operation names, azstore's by Azure's REST operations, gcsstore's
	// by JSON API methods.
	writeOps, readOps []string
}

// storePrices are the list prices, keyed by store kind:
//
//   - s3: S3 Standard, us-east-1, https://aws.amazon.com/s3/pricing/
//     (PUT, COPY, POST, LIST $0.005 per 1,000; GET, SELECT and all other
//     requests $0.0004 per 1,000; DELETE free).
//   - azure: Azure Blob Storage block blobs, Hot tier, LRS, East US,
//     https://azure.microsoft.com/pricing/details/storage/blobs/ (write
//     operations, among them Put Blob, Put Block and Put Block List, and
//     list and create-container operations $0.065 per 10,000; read
//     operations and "all other operations", such as Get Blob
//     Properties, $0.005 per 10,000; Delete Blob free), the operations'
//     types as https://learn.microsoft.com/azure/storage/blobs/map-rest-apis-transaction-categories
//     maps them for general-purpose v2 accounts.
//   - gcs: Cloud Storage Standard, https://cloud.google.com/storage/pricing
//     (Class A: objects.insert, objects.compose, objects.list $0.005 per
//     1,000; Class B: objects.get $0.0004 per 1,000; objects.delete free).
var storePrices = []Prices{
	{Store: "s3", Tier: "S3 Standard, us-east-1", WriteClass: "PUT-class", ReadClass: "GET-class",
		Write: 0.005 / 1000, Read: 0.0004 / 1000,
		writeOps: []string{"PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "CopyObject", "ListObjectsV2", "ListMultipartUploads", "ListParts"},
		readOps:  []string{"GetObject", "HeadObject", "HeadBucket"}},
	{Store: "azure", Tier: "Azure Blob Storage Hot LRS, East US", WriteClass: "write operations", ReadClass: "read operations",
		Write: 0.065 / 10000, Read: 0.005 / 10000,
		writeOps: []string{"PutBlob", "PutBlock", "PutBlockList", "ListBlobs", "CreateContainer"},
		readOps:  []string{"GetBlob", "GetBlobProperties", "GetBlockList", "GetContainerProperties"}},
	{Store: "gcs", Tier: "Cloud Storage Standard", WriteClass: "Class A", ReadClass: "Class B",
		Write: 0.005 / 1000, Read: 0.0004 / 1000,
		writeOps: []string{"objects.insert", "objects.compose", "objects.list", "buckets.insert"},
		readOps:  []string{"objects.get", "buckets.get"}},
}

// s3Prices are S3 Standard's, which the plan's Pays uses.
var s3Prices = storePrices[0]

// PricesOf returns the prices of store kind (s3, azure or gcs; empty is
// s3).
func PricesOf(kind string) (Prices, error) {
	if kind == "" {
		kind = "s3"
	}
	for _, p := range storePrices {
		if p.Store == kind {
			return p, nil
		}
	}
	return Prices{}, fmt.Errorf("no request prices for store %q: want s3, azure or gcs", kind)
}

// Dollars prices r: its PUT-class requests at the write class's price,
// its GETs at the read class's.
func (p Prices) Dollars(r Requests) float64 {
	return float64(r.PUT)*p.Write + float64(r.GET)*p.Read
}

// Classify sorts counted requests (per operation, as store.Counter
// counts them) into the store's write and read classes; Other is every
// request of neither: free (deletes, aborts) or not priced here.
func (p Prices) Classify(ops map[string]int64) (r Requests, other int64) {
	for op, n := range ops {
		switch {
		case slices.Contains(p.writeOps, op):
			r.PUT += n
		case slices.Contains(p.readOps, op):
			r.GET += n
		default:
			other += n
		}
	}
	return r, other
}

// ObjectWrites is the write-class requests that store an object of
// parts parts as durashuffle's uploads do: one part in a single put, more
// in a multipart upload (UploadWrites).
func (p Prices) ObjectWrites(parts int64) int64 {
	if parts <= 1 {
		return max(0, parts)
	}
	return p.UploadWrites(parts)
}

// UploadWrites is the write-class requests of a multipart upload of parts
// parts on the store. S3 counts a create, the parts and a complete; Azure
// a Put Block per part and one Put Block List (the upload ID is made
// locally); GCS an objects.insert per part object and the
// objects.compose calls that join them, 32 sources each, in a tree above
// 32 parts (the part objects' deletes are free).
func (p Prices) UploadWrites(parts int64) int64 {
	switch p.Store {
	case "azure":
		return parts + 1
	case "gcs":
		return parts + composes(parts)
	}
	return parts + 2
}

// composes is the objects.compose calls that join n part objects: a
// level of groups of 32 while more than 32 remain, then one.
func composes(n int64) int64 {
	const sources = 32
	var calls int64
	for n > sources {
		n = (n + sources - 1) / sources
		calls += n
	}
	return calls + 1
}

// PredictOn is the plan's prediction with the combining tasks' objects
// stored as the store of prices stores them (Predict counts S3's
// requests), and Pays judged at its prices.
func (p *Plan) PredictOn(prices Prices) Prediction {
	pr := p.Predict
	for _, size := range p.TaskBytes {
		pr.Combine.PUT += p.taskWrites(prices, size) - p.taskWrites(s3Prices, size)
	}
	pr.Pays = prices.Dollars(pr.Combine.add(pr.Combined)) < prices.Dollars(pr.Direct)
	return pr
}

// taskWrites is the write-class requests that store a task's object of
// size bytes: none when empty, a single put when it fits one part, else
// a multipart upload of parts of partBytes.
func (p *Plan) taskWrites(prices Prices, size int64) int64 {
	switch pb := p.partBytes(size); {
	case size <= 0:
		return 0
	case size <= pb:
		return 1
	default:
		return prices.UploadWrites(ceilDiv64(size, pb))
	}
}
