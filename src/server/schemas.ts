// Request and response schemas of `maxsim serve` (TypeBox: one schema gives the validation, the types
// and the OpenAPI document). Embedding fields are checked shallowly here (an array, or a base64
// tensor object) and in depth by codecs.ts, whose errors name the exact element.

import { type Static, Type } from 'typebox';

const FloatDType = Type.Union(
  ['float32', 'float16', 'bfloat16', 'fp32', 'f32', 'fp16', 'f16', 'bf16'].map((d) => Type.Literal(d)),
  {
    description:
      'element type of the base64 bytes (little-endian): float32, float16 or bfloat16 (fp32 / f32, fp16 / f16, bf16 also); default float32',
  },
);

export const B64Tensor = Type.Object(
  {
    b64: Type.String({ description: 'little-endian bytes, standard base64' }),
    dtype: Type.Optional(FloatDType),
    shape: Type.Array(Type.Integer({ minimum: 0 }), {
      description: '[L, d] for one item, [n, L, d] for several',
    }),
    lengths: Type.Optional(
      Type.Array(Type.Integer({ minimum: 0 }), {
        description: '[n, L, d] only: real tokens per item (<= L)',
      }),
    ),
  },
  { additionalProperties: false },
);

/** One item's tokens: [tokens][dim] numbers, or a base64 tensor of shape [L, d]. */
export const Embedding = Type.Union([
  Type.Array(Type.Unknown(), { description: '[tokens][dim] numbers' }),
  B64Tensor,
]);
/** Several items: [items][tokens][dim] numbers, or a base64 tensor of shape [n, L, d]. */
export const Embeddings = Type.Union([
  Type.Array(Type.Unknown(), { description: '[items][tokens][dim] numbers (items may differ in length)' }),
  B64Tensor,
]);

const strict = { additionalProperties: false } as const;

/** Texts for the server's model (maxsim serve --model DIR); bounds are checked by the route (413). */
const Texts = Type.Array(Type.String(), {
  description: "texts, encoded with the server's ColBERT model (400 without one)",
});
const QueryText = Type.String({ description: "one query as text, encoded with the server's model" });

export const InlineDocument = Type.Object(
  {
    id: Type.Optional(
      Type.String({ minLength: 1, maxLength: 1024, description: 'well-formed Unicode (no lone surrogates)' }),
    ),
    embeddings: Type.Optional(Embedding),
    embeddings_b64: Type.Optional(
      Type.String({ description: 'shorthand for embeddings: {b64, dtype, shape}' }),
    ),
    dtype: Type.Optional(FloatDType),
    shape: Type.Optional(Type.Array(Type.Integer({ minimum: 0 }))),
  },
  strict,
);
export type InlineDocument = Static<typeof InlineDocument>;

const TopK = Type.Integer({ minimum: 0, maximum: 10000, default: 10, description: 'hits per query' });
const Prefilter = Type.Literal('int8', {
  description:
    'scan an int8 copy on the GPU, rescore 4 x top_k candidates exactly (GPU-resident corpus only)',
});

const Exact = Type.Boolean({
  description: 'true: the full scan, even where the corpus has an index (the default goes through it)',
});
const IndexSettings = Type.Union(
  [
    Type.Literal(false, { description: 'the full scan (as exact: true)' }),
    Type.Object(
      {
        nprobe: Type.Optional(Type.Integer({ description: 'centroids probed per query token (1..K)' })),
        candidates: Type.Optional(
          Type.Integer({ description: 'documents kept by centroid interaction, scored on the residuals' }),
        ),
        rescore: Type.Optional(
          Type.Integer({ description: 'residual-scored documents re-scored exactly (>= top_k)' }),
        ),
        threshold: Type.Optional(Type.Number({ description: 'centroid pruning threshold (default none)' })),
        prune: Type.Optional(
          Type.Number({
            minimum: 0,
            description:
              "the CPU residual stage's token pruning, a fraction of each query token's best centroid score (default 0.25)",
          }),
        ),
        interaction: Type.Optional(
          Type.Union([Type.Literal('lists'), Type.Literal('bags'), Type.Literal('hybrid')], {
            description:
              "how reached documents are ranked before the residual stage (CPU default 'lists'; the GPU runs 'bags')",
          }),
        ),
        precision: Type.Optional(
          Type.Union([Type.Literal('float16'), Type.Literal('float32')], {
            description:
              "the GPU stages' product arithmetic (default float16 where the corpus keeps its tokens)",
          }),
        ),
      },
      strict,
    ),
  ],
  { description: 'the index settings of this search (docs/index.md), or false: the full scan' },
);

export const SearchBody = Type.Object(
  {
    queries: Type.Optional(Type.Union([Embeddings, Texts])),
    query: Type.Optional(QueryText),
    top_k: Type.Optional(TopK),
    prefilter: Type.Optional(Prefilter),
    exact: Type.Optional(Exact),
    index: Type.Optional(IndexSettings),
    ids: Type.Optional(
      Type.Array(Type.String(), {
        maxItems: 100000,
        description: 'search only these documents (ids of the corpus)',
      }),
    ),
  },
  strict,
);
export type SearchBody = Static<typeof SearchBody>;

/** The query string of a .npy search (strings there: no type coercion anywhere, so top_k is parsed). */
export const SearchQuery = Type.Object(
  {
    top_k: Type.Optional(Type.String({ pattern: '^[0-9]{1,5}$', description: 'hits per query (0-10000)' })),
    prefilter: Type.Optional(Prefilter),
    exact: Type.Optional(
      Type.Union([Type.Literal('true'), Type.Literal('false')], {
        description: 'true: the full scan, even where the corpus has an index',
      }),
    ),
  },
  strict,
);
export type SearchQuery = Static<typeof SearchQuery>;

const Score = Type.Union([Type.Number(), Type.Null()], {
  description: 'null for a document without tokens (its MaxSim is -Infinity)',
});
const Empty = Type.Optional(
  Type.Literal(true, { description: 'the document has no tokens (score null); absent otherwise' }),
);
const Hit = Type.Object({ id: Type.String(), index: Type.Integer(), score: Score, empty: Empty });
const Stage = Type.Object({
  name: Type.String({ description: 'centroids, candidates, interaction, residual or rescore' }),
  candidates: Type.Integer({ description: 'documents the stage produced (centroids: centroids probed)' }),
  ms: Type.Number(),
});
const SearchStats = Type.Object(
  {
    path: Type.Union([Type.Literal('index'), Type.Literal('scan'), Type.Literal('ids')], {
      description: "index: through the corpus's index; scan: the full scan; ids: the listed documents",
    }),
    scores: Type.Union([Type.Literal('exact'), Type.Literal('residual')], {
      description:
        'exact: exact MaxSim of the stored tokens; residual: MaxSim of the decoded residuals (a corpus that keeps only its index)',
    }),
    generation: Type.Integer({ description: 'the corpus generation the search ran on' }),
    reason: Type.Optional(Type.String({ description: 'why a corpus with an index was scanned' })),
    index: Type.Optional(
      Type.Object({
        backend: Type.String({ description: 'where the index stages ran: cpu or cuda' }),
        nprobe: Type.Integer(),
        candidates: Type.Integer(),
        rescore: Type.Integer(),
        interaction: Type.String({ description: "the interaction the stages ran ('bags' on the GPU)" }),
        precision: Type.String({
          description: "the stages' product arithmetic: float16 or float32 (the CPU's)",
        }),
        indexed_segments: Type.Integer(),
        scanned_documents: Type.Integer({ description: 'documents of unindexed segments, scanned exactly' }),
        stages: Type.Array(Stage, { description: "the pass's stages (all its queries)" }),
      }),
    ),
  },
  { description: 'what the search pass that answered did (shared by the requests of a pass)' },
);
export const SearchResponse = Type.Object({
  results: Type.Array(Type.Array(Hit)),
  stats: Type.Optional(SearchStats),
});

export const RerankBody = Type.Object(
  {
    query: Type.Union([Embedding, QueryText]),
    candidates: Type.Optional(
      Type.Array(Type.String(), { maxItems: 100000, description: 'ids of the corpus' }),
    ),
    documents: Type.Optional(
      // one array schema for both, so a mix reaches the route and is named there
      Type.Array(Type.Union([InlineDocument, Type.String()]), {
        maxItems: 100000,
        description:
          "inline documents: all embeddings ({embeddings} objects) or all texts (strings, encoded with the server's model)",
      }),
    ),
    top_n: Type.Optional(Type.Integer({ minimum: 0 })),
    return_documents: Type.Optional(
      Type.Boolean({ description: 'each result with its document {text} (documents sent as texts)' }),
    ),
  },
  strict,
);
export type RerankBody = Static<typeof RerankBody>;

export const RerankResponse = Type.Object({
  results: Type.Array(
    Type.Object({
      index: Type.Integer({ description: 'position in the request' }),
      id: Type.Optional(Type.String()),
      relevance_score: Score,
      empty: Empty,
      document: Type.Optional(Type.Object({ text: Type.String() })),
    }),
  ),
});

export const ScoreBody = Type.Object(
  {
    queries: Embeddings,
    documents: Type.Union(
      [Type.Array(Type.Union([InlineDocument, Type.Array(Type.Unknown())]), { maxItems: 100000 }), B64Tensor],
      {
        description:
          'a list of documents (inline {embeddings} objects or [tokens][dim] numbers, or all {id}: documents of the corpus), or [n][tokens][dim] numbers, or a base64 tensor [n, L, d]',
      },
    ),
  },
  strict,
);
export type ScoreBody = Static<typeof ScoreBody>;

export const ScoreResponse = Type.Object({
  scores: Type.Array(Type.Array(Score), { description: '[queries][documents]' }),
});

export const DocumentsBody = Type.Object(
  {
    documents: Type.Optional(Type.Array(InlineDocument, { minItems: 1, maxItems: 1000000 })),
    texts: Type.Optional(Texts),
    ids: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 1024 }), {
        description: 'with texts: one id per text (a corpus with ids needs them)',
      }),
    ),
  },
  strict,
);
export type DocumentsBody = Static<typeof DocumentsBody>;

export const DocumentsResponse = Type.Object({
  added: Type.Integer(),
  first_index: Type.Integer(),
  documents: Type.Integer({ description: 'documents in the corpus now' }),
  generation: Type.Integer(),
});

export const DeleteDocumentsBody = Type.Object(
  {
    ids: Type.Array(Type.String(), {
      minItems: 1,
      maxItems: 1000000,
      description: 'ids of live documents (indices as decimal strings for a corpus without ids)',
    }),
  },
  strict,
);
export type DeleteDocumentsBody = Static<typeof DeleteDocumentsBody>;

export const DeleteDocumentsResponse = Type.Object({
  deleted: Type.Integer({ description: 'documents deleted by this request' }),
  live: Type.Integer({ description: 'live documents in the corpus now' }),
  generation: Type.Integer(),
});

export const ErrorResponse = Type.Object({
  error: Type.Object({
    code: Type.String(),
    message: Type.String(),
    field: Type.Optional(Type.String()),
    expected: Type.Optional(Type.String()),
    received: Type.Optional(Type.String()),
    missing: Type.Optional(Type.Array(Type.String())),
  }),
});

/** The server's ColBERT model (GET /v1/model, and /v1/info's model). */
export const ModelInfo = Type.Object({
  name: Type.String({ description: "the model directory's name" }),
  source: Type.Union([Type.Literal('option'), Type.Literal('corpus')], {
    description: "'option': --model; 'corpus': the model the corpus records (encoder.json)",
  }),
  dim: Type.Integer(),
  hidden: Type.Union([Type.Integer(), Type.Null()]),
  query_length: Type.Integer(),
  document_length: Type.Integer(),
  query_prefix: Type.String(),
  document_prefix: Type.String(),
  query_expansion: Type.Boolean(),
  attend_to_expansion_tokens: Type.Boolean(),
  skiplist: Type.Integer({ description: 'tokens removed from documents after encoding' }),
  lowercase: Type.Boolean(),
  backend: Type.String({ description: 'where the encoder runs' }),
});

/** The error answers of the read routes (search, rerank, score), for their OpenAPI responses. */
export const READ_ERRORS = {
  400: ErrorResponse,
  404: ErrorResponse,
  413: ErrorResponse,
  429: ErrorResponse,
  504: ErrorResponse,
};

export const InfoResponse = Type.Object({
  version: Type.String(),
  backend: Type.String(),
  mode: Type.String(),
  kernels: Type.Object({ cpu: Type.String(), gpu: Type.Optional(Type.String()) }),
  corpus: Type.Object({
    path: Type.String(),
    dtype: Type.String(),
    dim: Type.Integer(),
    documents: Type.Integer({ description: 'documents stored, deleted ones included (the index space)' }),
    live: Type.Integer({ description: 'documents searches see' }),
    deleted: Type.Integer({ description: 'deleted documents not yet compacted away' }),
    tokens: Type.Integer(),
    segments: Type.Integer(),
    generation: Type.Integer(),
    ids: Type.Boolean(),
  }),
  index: Type.Union(
    [
      Type.Object({
        bits: Type.Integer(),
        centroids: Type.Integer(),
        sample: Type.Integer(),
        bytes: Type.Integer({ description: 'bytes of the index files' }),
        bytes_per_token: Type.Number(),
        indexed_segments: Type.Integer(),
        unindexed_segments: Type.Integer({ description: 'appended since the index was built: scanned' }),
        drift: Type.Number(),
        rebuild_advised: Type.Boolean(),
        tokens: Type.Union([Type.Literal('kept'), Type.Literal('dropped')], {
          description: 'dropped: the corpus keeps only its index (scores are residual)',
        }),
        search_path: Type.Union([Type.Literal('index'), Type.Literal('scan')], {
          description: 'the path default searches take on this server',
        }),
        reason: Type.Optional(Type.String()),
      }),
      Type.Null(),
    ],
    { description: 'the corpus index (maxsim corpus index), or null: none' },
  ),
  batching: Type.Object({
    max_batch: Type.Integer(),
    max_wait_ms: Type.Union([Type.Number(), Type.Literal('auto')]),
    /** the wait for company in force now, ms */
    wait_ms: Type.Number(),
    max_queue: Type.Integer(),
    passes_in_flight: Type.Integer(),
    /** work one request may ask for (query tokens x document tokens x dim); null: no limit */
    max_work: Type.Union([Type.Number(), Type.Null()]),
    /** the 8-bit type every search pass scans (then rescored exactly); null: exact float passes */
    dtype: Type.Union([Type.Literal('int8'), Type.Literal('fp8'), Type.Null()]),
  }),
  model: Type.Union([ModelInfo, Type.Null()], { description: 'null: no model, embeddings only' }),
});
