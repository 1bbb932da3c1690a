package shard

// LogPerReason is how many problems of one reason are logged at Warn, by
// a conversion (datasets.Report) and by a loader skipping rows alike;
// the rest go to Debug, since one bad annotation file or one damaged row
// group is hundreds of problems of a single reason and the first few
// already say what is wrong. It lives here, with the shard skip reasons,
// because both sides of the shards use it.
const LogPerReason = 10
