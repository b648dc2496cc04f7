import os
import pathlib

import pyarrow.fs as fs

dest = pathlib.Path(os.environ["DEST"])
if (dest / ".dsv4-download-complete").exists():
    raise SystemExit(f"weights already in {dest}")
dest.mkdir(parents=True, exist_ok=True)
source = os.environ["SOURCE"].removeprefix("s3://")
print(f"copying s3://{source} to {dest}", flush=True)
fs.copy_files(
    source,
    str(dest),
    source_filesystem=fs.S3FileSystem(),
    destination_filesystem=fs.LocalFileSystem(),
    use_threads=True,
)
(dest / ".dsv4-download-complete").touch()
print("download complete", flush=True)
