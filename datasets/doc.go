// Package datasets holds what every dataset reader (datasets/coco,
// datasets/yolo) shares: the bad-input policy and its Report.
//
// Bad input never crashes a reader and never passes silently. Each problem
// found in a dataset is a *Problem naming the file, the JSON byte offset or
// label line, the image id and annotation id it concerns, and a stable
// Reason string. By default a reader skips the offending item (an image, an
// annotation, or a single polygon ring; the Reason says which), counts it in
// its Report and logs it with log/slog under the keys file, image_id, ann_id
// and reason. In strict mode the first problem is returned as the error
// instead; errors.Is(err, ErrBadInput) reports whether an error is such a
// problem. A document that cannot be parsed at all (malformed or truncated
// JSON, an unreadable data.yaml) is always an error, with its byte offset.
//
// Logging is bounded: the first LogPerReason problems of each reason are
// logged at Warn, the rest at Debug, so a dataset with a systematic defect
// does not flood the log while the counts stay exact.
package datasets
