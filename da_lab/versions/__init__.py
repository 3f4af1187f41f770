"""What da_lab knows about vLLM releases, in one room below the hook: every vLLM symbol the
package reads, per release (`needs`, the driver side's in `needs_engine`), which releases load,
warn or are refused (`releases`), how the DA edit treats each CommonAttentionMetadata field
(`cm_fields`), and what each release's sources offer (`manifests/`, read by checks/manifest.py).
Imports no vLLM: whoever reads vLLM imports this."""
