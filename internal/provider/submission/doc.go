// Package submission holds the provider's data source fediversity_submission: the
// submission merged into the baked configuration, one node plan per node. It imports the
// shared internal/provider/kit and no other family (internal/archtest).
package submission
