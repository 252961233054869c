// Package addrindex maps device addresses to values, in shards chosen by
// address bits, so that operations at different addresses rarely meet on a
// lock. memtrack indexes the memory it tracks by address with it, one
// [Index] per kind of device.
//
// Each [Shard] is an open-addressing table with linear probing, probed once
// per operation under the shard's lock, so that indexing an address
// allocates nothing but the table's growth. Its invariants: address 0 is
// never indexed (a slot with key 0 is free); at most half the slots are
// used; a deletion shifts the slots after it back instead of leaving a
// marker, so that every key stays reachable from its home slot.
package addrindex
