//! Which image a server runs: the pins in `images.txt`, and the choice between the
//! official image and the local one.

use testcontainers::bollard::Docker;

use crate::error::HarnessError;
use crate::server::{ImageSource, Server};

pub(crate) const IMAGES: &str = include_str!("../images.txt");

/// The image pinned for `entry` in `images.txt`, as (name, tag).
pub(crate) fn pinned(entry: &str) -> Option<(&'static str, &'static str)> {
    IMAGES
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some((words.next()?, words.next()?))
        })
        .find(|(name, _)| *name == entry)
        .and_then(|(_, image)| image.rsplit_once(':'))
}

async fn present(docker: &Docker, (name, tag): (&str, &str)) -> bool {
    docker.inspect_image(&format!("{name}:{tag}")).await.is_ok()
}

/// The image source that `DISTLOCK_IMAGES` asks for, resolved against the images
/// present on this machine.
pub async fn image_source(server: &dyn Server) -> Result<ImageSource, HarnessError> {
    if server.local_only() {
        return Ok(ImageSource::Local);
    }
    let choice = std::env::var("DISTLOCK_IMAGES").unwrap_or_else(|_| "auto".into());
    match choice.as_str() {
        "official" => Ok(ImageSource::Official),
        "local" => Ok(ImageSource::Local),
        "auto" | "" => {
            let docker = Docker::connect_with_local_defaults()
                .map_err(|e| HarnessError::Docker(Box::new(e)))?;
            let official =
                pinned(server.image_entry()).ok_or(HarnessError::NoPin(server.name()))?;
            let local = pinned("local").ok_or(HarnessError::NoPin("local"))?;
            if present(&docker, official).await {
                Ok(ImageSource::Official)
            } else if present(&docker, local).await {
                Ok(ImageSource::Local)
            } else {
                Ok(ImageSource::Official)
            }
        }
        other => Err(HarnessError::BadImageChoice(other.to_owned())),
    }
}
