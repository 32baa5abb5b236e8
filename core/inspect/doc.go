// Package inspect is what sluice's Caddy module shows operators of its
// limits: the state a MemoryStore or redisstore.Store holds for a key, read
// without charging it or forgotten (Of, Inspector, KeyState), the count
// of a limit's states in Redis (CountKeys), and the keys a zone sees most
// rejected, admitted or near its limit, ranked in constant memory
// (HeavyHitters).
//
// It is apart from package core, which it reaches through a few exported
// hooks (core/peek.go, redisstore.Store.Eval, redisstore.Lua), so that the Traefik
// plugin, which imports core but never inspects, does not load this code
// under Yaegi. It imports the standard library and core only.
package inspect
