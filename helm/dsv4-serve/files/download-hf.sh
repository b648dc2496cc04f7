if [ -f "$DEST/.dsv4-download-complete" ]; then echo "weights already in $DEST"; exit 0; fi
mkdir -p "$DEST"
echo "downloading $SOURCE to $DEST"
# `hf` is huggingface_hub.cli.hf:main; the module form needs no console script.
python3 -m huggingface_hub.cli.hf download "$SOURCE" ${REVISION:+--revision "$REVISION"} --local-dir "$DEST"
touch "$DEST/.dsv4-download-complete"
echo "download complete: $(du -sh "$DEST" | cut -f1)"
