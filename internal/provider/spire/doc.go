// Package spire holds the provider's SPIRE objects: fediversity_spire_registration,
// fediversity_spire_handoff and the data source fediversity_spire_trust_bundle, and how
// they reach the spire node. It imports the shared internal/provider/kit and no other
// family (internal/archtest).
package spire
