"""Everything that knows which vLLM (or Ray) is installed: the supported-version matrix,
import aliases for module paths vLLM moved, and importing DSV4's model modules off the CPU
as vLLM itself would."""
