include Consort.Lru (* the bounded tables live in the foundation (src/core/lru.mli) *)
